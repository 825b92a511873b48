#include "load_memcached.h"

#include <fmt/core.h>
#include <libmemcached/memcached.h>

#include <atomic>
#include <cstdlib>
#include <deque>
#include <exception>
#include <memory>
#include <stdexcept>
#include <thread>

#include "trust.h"

namespace kv {

namespace {

using Clock = std::chrono::steady_clock;

struct MemcachedDeleter {
  void operator()(memcached_st* m) const { memcached_free(m); }
};
using Memcached = std::unique_ptr<memcached_st, MemcachedDeleter>;

Memcached connect(const std::string& server) {
  const auto colon = server.rfind(':');
  if (colon == std::string::npos) {
    throw std::runtime_error(fmt::format("'{}' is not HOST:PORT", server));
  }
  const std::string host = server.substr(0, colon);
  const int port = std::atoi(server.c_str() + colon + 1);
  Memcached m(memcached_create(nullptr));
  if (!m) throw std::runtime_error("memcached_create failed");
  // Small requests are latency-bound: no Nagle delay (memtier and memaslap
  // set it too).
  memcached_behavior_set(m.get(), MEMCACHED_BEHAVIOR_TCP_NODELAY, 1);
  const memcached_return_t rc =
      memcached_server_add(m.get(), host.c_str(), static_cast<in_port_t>(port));
  if (rc != MEMCACHED_SUCCESS) {
    throw std::runtime_error(
        fmt::format("memcached_server_add {}: {}", server, memcached_strerror(m.get(), rc)));
  }
  return m;
}

struct Thread {
  Thread(const LoadOptions& opt, uint16_t index) : workload(opt.workload, index) {}
  Workload workload;
  LoadResult result;
  void fail(memcached_st* m, memcached_return_t rc) {
    if (result.failures++ == 0) result.first_failure = memcached_strerror(m, rc);
  }
};

// One operation, timed; false when it failed.
bool run_op(memcached_st* m, Thread& t, const std::string& key, const Workload::Op& op,
            bool measuring) {
  const auto start = Clock::now();
  memcached_return_t rc{};
  if (op.kind == OpKind::kGet) {
    size_t value_bytes = 0;
    uint32_t flags = 0;
    char* value = memcached_get(m, key.data(), key.size(), &value_bytes, &flags, &rc);
    std::free(value);
    if (rc == MEMCACHED_NOTFOUND) {
      t.result.misses++;
      rc = MEMCACHED_SUCCESS;
    }
  } else {
    rc = memcached_set(m, key.data(), key.size(), t.workload.value_bytes().data(), op.value_bytes,
                       0, 0);
  }
  const auto latency_ns =
      static_cast<uint64_t>(std::chrono::nanoseconds(Clock::now() - start).count());
  if (rc != MEMCACHED_SUCCESS) {
    t.fail(m, rc);
    return false;
  }
  if (measuring) {
    (op.kind == OpKind::kGet ? t.result.get_ns : t.result.put_ns).record(latency_ns);
    t.result.ops++;
  }
  return true;
}

void run_thread(const LoadOptions& opt, const std::vector<std::string>& keys, Thread& t,
                uint16_t index, std::atomic<uint16_t>& preloaded) {
  Memcached m = connect(opt.server);
  t.result.transport = "tcp";
  if (opt.preload) {
    for (uint64_t r = index; r < keys.size(); r += opt.threads) {
      if (!run_op(m.get(), t, keys[r], {OpKind::kPut, r, opt.workload.value_bytes_max}, false)) {
        throw std::runtime_error(fmt::format("preload of {} into memcached at {} failed: {}",
                                             keys[r], opt.server, t.result.first_failure));
      }
    }
  }
  preloaded++;
  while (preloaded.load() < opt.threads) std::this_thread::yield();

  const auto warm_end = Clock::now() + opt.warmup;
  while (Clock::now() < warm_end) {
    const Workload::Op op = t.workload.next();
    run_op(m.get(), t, keys[op.record], op, false);
  }
  measure::ContextSwitches context_switches;
  context_switches.start();
  const auto start = Clock::now();
  const auto end = start + opt.duration;
  while (Clock::now() < end) {
    const Workload::Op op = t.workload.next();
    run_op(m.get(), t, keys[op.record], op, true);
  }
  t.result.elapsed_s = std::chrono::duration<double>(Clock::now() - start).count();
  context_switches.stop();
  t.result.context_switches = context_switches.count();
}

}  // namespace

LoadResult run_memcached_load(const LoadOptions& opt) {
  const std::vector<std::string> keys = all_keys(opt.workload.keys);
  std::deque<Thread> states;
  for (uint16_t i = 0; i < opt.threads; i++) states.emplace_back(opt, i);
  run_load_threads(opt.threads, [&](uint16_t i, std::atomic<uint16_t>& preloaded) {
    run_thread(opt, keys, states[i], i, preloaded);
  });
  LoadResult total;
  for (const Thread& t : states) total.merge(t.result);
  return total;
}

}  // namespace kv
