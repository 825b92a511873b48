// Helpers shared by the engine tests: a server Rpc on its own thread,
// waiting loops with deadlines, and byte patterns to check every byte.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <initializer_list>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "librpc/rpc_all.h"

namespace rpc::test {

// The transport the engine tests marked [any_transport] run over: udp,
// unless LIBRPC_TEST_TRANSPORT names another (the verbs suite sets it; see
// test/verbs_main.cc).
inline std::string test_transport() {
  const char* name = std::getenv("LIBRPC_TEST_TRANSPORT");
  return name != nullptr && *name != '\0' ? name : "udp";
}
inline RpcConfig test_rpc_config(RpcConfig config) {
  config.transport = test_transport();
  if (const char* provider = std::getenv("LIBRPC_TEST_FABRIC_PROVIDER")) {
    config.fabric_provider = provider;
  }
  return config;
}

// A Nexus on loopback, on a port the kernel picks.
inline NexusConfig local_nexus() { return NexusConfig{.uri = "127.0.0.1:0"}; }

inline constexpr ReqType kEcho = 1;          // foreground echo
inline constexpr ReqType kEchoBg = 2;        // background echo
inline constexpr ReqType kEchoDeferred = 3;  // responds from a later loop iteration
inline constexpr ReqType kNested = 4;        // forwards to another server, then responds

inline uint8_t pattern_byte(size_t i, uint64_t seed) {
  return static_cast<uint8_t>((i * 131 + seed * 7 + (i >> 8)) & 0xff);
}
inline void fill_pattern(MsgBuffer& b, uint64_t seed) {
  for (size_t i = 0; i < b.size(); i++) b.data()[i] = pattern_byte(i, seed);
}
inline bool check_pattern(const MsgBuffer& b, size_t size, uint64_t seed) {
  if (b.size() != size) return false;
  for (size_t i = 0; i < size; i++) {
    if (b.data()[i] != pattern_byte(i, seed)) return false;
  }
  return true;
}

// Echo into a buffer large enough for the request (the Rpc owns it after).
inline void echo_into_response(ReqHandle& h) {
  const MsgBuffer& req = h.request();
  MsgBuffer& pre = h.pre_resp_buffer();
  if (req.size() <= pre.max_size()) {
    std::copy_n(req.data(), req.size(), pre.data());
    pre.resize(req.size());
    h.rpc().enqueue_response(h, pre);
    return;
  }
  MsgBuffer resp = h.rpc().alloc_msg_buffer(req.size());
  std::copy_n(req.data(), req.size(), resp.data());
  h.rpc().enqueue_response(h, resp);
}

// Runs `body` until it returns true or the deadline passes, driving rpc.
inline bool run_until(Rpc& rpc, const std::function<bool()>& done,
                      std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    rpc.run_event_loop_once();
  }
  return true;
}

// Code a ServerThread runs on its Rpc's thread.
struct ServerHooks {
  // Once, right after the Rpc is created and before the constructor of the
  // ServerThread returns (e.g. to open sessions of its own).
  std::function<void(Rpc&)> on_start;
  // After every event-loop iteration (e.g. to send deferred responses).
  std::function<void(Rpc&)> on_iteration;
};

// An Rpc on its own thread (rpc::EventLoopThread), with the test's hooks
// and live copies of two counters other threads may read.
class ServerThread {
 public:
  ServerThread(Nexus& nexus, RpcConfig config, ServerHooks hooks = {})
      : loop_(nexus, config, [this, on_iteration = std::move(hooks.on_iteration)](Rpc& rpc) {
          if (on_iteration) on_iteration(rpc);
          active_sessions_.store(rpc.num_active_sessions(), std::memory_order_relaxed);
          handlers_run_.store(rpc.stats().handlers_run, std::memory_order_relaxed);
        }) {
    if (hooks.on_start) (void)loop_.run_and_wait([&](Rpc& rpc) { hooks.on_start(rpc); });
  }
  ~ServerThread() { stop(); }
  void stop() {
    (void)loop_.run_and_wait([this](Rpc& rpc) { stats_ = rpc.stats(); });
    loop_.stop();
  }
  // Live copies of the Rpc's num_active_sessions() and handlers_run,
  // refreshed every iteration; readable from any thread.
  size_t num_active_sessions() const { return active_sessions_.load(); }
  uint64_t handlers_run() const { return handlers_run_.load(); }
  // Counters after stop().
  const RpcStats& final_stats() const { return stats_; }

 private:
  std::atomic<size_t> active_sessions_{0};
  std::atomic<uint64_t> handlers_run_{0};
  RpcStats stats_;
  EventLoopThread loop_;  // last: stopped (by ~ServerThread) before the counters go
};

// Drives several Rpcs of this thread in turn until done() or the deadline.
inline bool run_all_until(std::initializer_list<Rpc*> rpcs, const std::function<bool()>& done,
                          std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    for (Rpc* rpc : rpcs) rpc->run_event_loop_once();
  }
  return true;
}

// Drives rpc for about `duration` (to let late packets and callbacks in).
inline void run_for(Rpc& rpc, std::chrono::milliseconds duration) {
  rpc.run_event_loop(std::chrono::duration_cast<std::chrono::microseconds>(duration));
}

// Waits (without driving any Rpc of this thread) until done() or timeout.
inline bool wait_until(const std::function<bool()>& done,
                       std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// Tracks session events for a client Rpc.
struct SessionEvents {
  std::vector<std::tuple<SessionNum, SessionEvent, SmErr>> events;
  SessionCallback callback() {
    return [this](SessionNum sn, SessionEvent e, SmErr err) { events.emplace_back(sn, e, err); };
  }
  bool has(SessionNum sn, SessionEvent e) const {
    for (auto& [s, ev, err] : events) {
      if (s == sn && ev == e) return true;
    }
    return false;
  }
  SmErr reason(SessionNum sn, SessionEvent e) const {
    for (auto& [s, ev, err] : events) {
      if (s == sn && ev == e) return err;
    }
    return SmErr::kNone;
  }
};

// Result slot for one request.
struct Outcome {
  bool done = false;
  Errc errc = Errc::kOk;
  size_t resp_size = 0;
};
inline void record_outcome(Rpc&, const Completion& c) {
  auto* o = static_cast<Outcome*>(c.tag);
  o->done = true;
  o->errc = c.errc;
  o->resp_size = c.resp_size;
}

// One echo request with its own buffers and a patterned payload; the
// continuation counts how often it ran.
struct EchoCall {
  MsgBuffer req;
  MsgBuffer resp;
  size_t size = 0;
  uint64_t seed = 0;
  int completions = 0;
  Errc errc = Errc::kOk;
  size_t resp_size = 0;
  size_t* total_done = nullptr;  // incremented on every completion, if set

  // Allocates and fills the buffers; false when allocation failed.
  bool prepare(Rpc& rpc, size_t req_size, uint64_t pattern_seed, size_t resp_capacity) {
    size = req_size;
    seed = pattern_seed;
    req = rpc.alloc_msg_buffer(req_size);
    resp = rpc.alloc_msg_buffer(resp_capacity);
    if (!req.valid() || !resp.valid()) return false;
    fill_pattern(req, seed);
    return true;
  }
  bool prepare(Rpc& rpc, size_t req_size, uint64_t pattern_seed) {
    return prepare(rpc, req_size, pattern_seed, req_size);
  }
  Errc enqueue(Rpc& rpc, SessionNum sn, ReqType req_type) {
    return rpc.enqueue_request(sn, req_type, req, resp, &EchoCall::on_done, this);
  }
  // Completed exactly once, successfully, with the request echoed back.
  bool echoed() const {
    return completions == 1 && errc == Errc::kOk && resp_size == size &&
           check_pattern(resp, size, seed);
  }
  void release(Rpc& rpc) {
    rpc.free_msg_buffer(req);
    rpc.free_msg_buffer(resp);
  }
  static void on_done(Rpc&, const Completion& c) {
    auto* call = static_cast<EchoCall*>(c.tag);
    call->completions++;
    call->errc = c.errc;
    call->resp_size = c.resp_size;
    if (call->total_done != nullptr) (*call->total_done)++;
  }
};

}  // namespace rpc::test
