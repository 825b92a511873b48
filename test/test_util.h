// Helpers shared by the engine tests: a server Rpc on its own thread,
// waiting loops with deadlines, and byte patterns to check every byte.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "rpc/rpc_all.h"

namespace rpc::test {

inline constexpr ReqType kEcho = 1;         // foreground echo
inline constexpr ReqType kEchoBg = 2;       // background echo
inline constexpr ReqType kEchoDeferred = 3; // responds from a later loop iteration
inline constexpr ReqType kNested = 4;       // forwards to another server, then responds

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

// An Rpc on its own thread, running its event loop until destroyed.
class ServerThread {
 public:
  ServerThread(Nexus& nexus, RpcConfig config) {
    thread_ = std::thread([this, &nexus, config] {
      Rpc rpc(nexus, config);
      rpc_ = &rpc;
      ready_.store(true);
      while (!stop_.load(std::memory_order_relaxed)) rpc.run_event_loop_once();
      stats_ = rpc.stats();
      rpc_ = nullptr;
    });
    while (!ready_.load()) std::this_thread::yield();
  }
  ~ServerThread() { stop(); }
  void stop() {
    if (thread_.joinable()) {
      stop_.store(true);
      thread_.join();
    }
  }
  // Counters after stop().
  const RpcStats& final_stats() const { return stats_; }

 private:
  std::atomic<bool> ready_{false};
  std::atomic<bool> stop_{false};
  Rpc* rpc_ = nullptr;
  RpcStats stats_;
  std::thread thread_;
};

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

}  // namespace rpc::test
