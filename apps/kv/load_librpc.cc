#include "load_librpc.h"

#include <fmt/core.h>

#include <atomic>
#include <deque>
#include <exception>
#include <span>
#include <stdexcept>
#include <thread>

#include "client.h"
#include "trust.h"

namespace kv {

namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kConnectTimeout = std::chrono::seconds(10);

enum class Phase : uint8_t { kPreload, kRun, kStop };

struct Slot;

// One load thread's state, touched only by that thread (its Rpc's
// continuations run on it).
struct LoadThread {
  LoadThread(const LoadOptions& opt_, const std::vector<std::string>& keys_, uint16_t index)
      : opt(opt_), keys(keys_), workload(opt_.workload, index), preload_next(index) {}
  const LoadOptions& opt;
  const std::vector<std::string>& keys;
  Workload workload;
  Client* client = nullptr;
  Phase phase = Phase::kPreload;
  bool measuring = false;
  uint64_t preload_next;  // this thread loads records index, index + threads, ...
  uint32_t in_flight = 0;
  LoadResult result;

  void issue(Slot& slot);
  void complete(Slot& slot, const rpc::Completion& c);
  void fail(std::string what) {
    if (result.failures++ == 0) result.first_failure = std::move(what);
  }
};

struct Slot {
  LoadThread* thread;
  rpc::OwnedBuffer req, resp;
  Clock::time_point start;
  OpKind kind = OpKind::kGet;
};

void LoadThread::issue(Slot& slot) {
  Workload::Op op{};
  if (phase == Phase::kPreload) {
    if (preload_next >= keys.size()) return;
    op = {OpKind::kPut, preload_next, workload.spec().value_bytes_max};
    preload_next += opt.threads;
  } else if (phase == Phase::kRun) {
    op = workload.next();
  } else {
    return;
  }
  slot.kind = op.kind;
  slot.start = Clock::now();
  auto done = [&slot](rpc::Rpc&, const rpc::Completion& c) { slot.thread->complete(slot, c); };
  const std::string& key = keys[op.record];
  const auto value = std::span<const uint8_t>(
      reinterpret_cast<const uint8_t*>(workload.value_bytes().data()), op.value_bytes);
  const rpc::Errc queued = op.kind == OpKind::kGet
                               ? client->get(key, slot.req, slot.resp, done)
                               : client->put(key, value, slot.req, slot.resp, done);
  if (queued != rpc::Errc::kOk) return fail(fmt::format("enqueue: {}", rpc::to_string(queued)));
  in_flight++;
}

void LoadThread::complete(Slot& slot, const rpc::Completion& c) {
  in_flight--;
  const auto latency_ns =
      static_cast<uint64_t>(std::chrono::nanoseconds(Clock::now() - slot.start).count());
  if (c.errc != rpc::Errc::kOk) {
    fail(describe_failure(c));
  } else if (slot.kind == OpKind::kGet) {
    const std::optional<GetResult> got = parse_get_response(slot.resp, c.resp_size);
    if (!got)
      fail("malformed GET response");
    else if (!got->found)
      result.misses++;
  } else if (parse_status_response(slot.resp, c.resp_size) != Status::kStored) {
    fail("malformed PUT response");
  }
  if (measuring && c.errc == rpc::Errc::kOk) {
    (slot.kind == OpKind::kGet ? result.get_ns : result.put_ns).record(latency_ns);
    result.ops++;
  }
  issue(slot);
}

void drain(rpc::Rpc& rpc, LoadThread& t) {
  while (t.in_flight > 0) rpc.run_event_loop_once();
}

void run_thread(const LoadOptions& opt, const app::TransportOptions& transport, rpc::Nexus& nexus,
                LoadThread& t, uint16_t index, std::atomic<uint16_t>& preloaded) {
  rpc::Rpc rpc(nexus, transport.rpc_config(static_cast<rpc::RpcId>(index)));
  auto client = Client::connect(rpc, opt.server, kConnectTimeout);
  if (!client) throw std::runtime_error(client.error());
  t.client = &*client;
  t.result.transport = rpc.transport_name();

  const size_t value_max = opt.workload.value_bytes_max;
  std::deque<Slot> slots;  // stay put: continuations hold their address
  for (uint32_t i = 0; i < opt.outstanding; i++) {
    slots.push_back(Slot{&t,
                         rpc::OwnedBuffer(rpc, kPutHeaderBytes + kMaxKeyBytes + value_max),
                         rpc::OwnedBuffer(rpc, kStatusBytes + value_max),
                         {},
                         OpKind::kGet});
    if (!slots.back().req.valid() || !slots.back().resp.valid()) {
      throw std::runtime_error("cannot allocate message buffers");
    }
  }
  if (!opt.preload) t.preload_next = t.keys.size();
  for (Slot& s : slots) t.issue(s);
  drain(rpc, t);
  // Every thread's records are in before any thread measures.
  preloaded++;
  while (preloaded.load() < opt.threads) rpc.run_event_loop_once();

  t.phase = Phase::kRun;
  const uint64_t retransmissions_before = rpc.stats().retransmissions;
  measure::ContextSwitches context_switches;
  for (Slot& s : slots) t.issue(s);
  rpc.run_event_loop(opt.warmup);
  t.measuring = true;
  context_switches.start();
  const auto start = Clock::now();
  rpc.run_event_loop(opt.duration);
  t.result.elapsed_s = std::chrono::duration<double>(Clock::now() - start).count();
  t.measuring = false;
  context_switches.stop();
  t.phase = Phase::kStop;
  drain(rpc, t);
  t.result.retransmissions = rpc.stats().retransmissions - retransmissions_before;
  t.result.context_switches = context_switches.count();
}

}  // namespace

LoadResult run_librpc_load(const LoadOptions& opt, const app::TransportOptions& transport,
                           const std::string& local_uri) {
  const std::vector<std::string> keys = all_keys(opt.workload.keys);
  rpc::Nexus nexus(rpc::NexusConfig{.uri = local_uri});
  std::deque<LoadThread> states;
  for (uint16_t i = 0; i < opt.threads; i++) states.emplace_back(opt, keys, i);
  run_load_threads(opt.threads, [&](uint16_t i, std::atomic<uint16_t>& preloaded) {
    run_thread(opt, transport, nexus, states[i], i, preloaded);
  });
  LoadResult total;
  for (const LoadThread& t : states) total.merge(t.result);
  return total;
}

}  // namespace kv
