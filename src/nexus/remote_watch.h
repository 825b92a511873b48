// Failure detection of remote Nexuses, on the SM thread: heartbeats to every
// remote that sessions refer to, silence declared as failure, and the
// challenge that confirms a claimed restart (another incarnation) before any
// session is reset. Not thread-safe: the SM thread owns it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <unordered_map>

#include "common/net_addr.h"
#include "wire/sm_msg.h"

namespace rpc::detail {

struct SmThreadStats;

class RemoteWatch {
 public:
  using Clock = std::chrono::steady_clock;
  using Send = std::function<void(const SmMsg&, const NetAddr&)>;
  // Told of a remote declared failed: its address and the incarnation
  // that failed (the Nexus tells every Rpc).
  using Failed = std::function<void(const NetAddr&, uint64_t)>;
  // The clock: Clock::now, or a test's manual one (no sleeping in tests).
  using Now = Clock::time_point (*)();
  struct Timing {
    std::chrono::milliseconds probe_retry;    // sm_retry_ms
    std::chrono::milliseconds probe_timeout;  // sm_timeout_ms
    std::chrono::milliseconds failure_timeout;
  };

  // send stamps and sends a message; failed is told of failures.
  RemoteWatch(SmThreadStats& stats, Send send, Failed failed, Timing timing, Now now = &Clock::now);

  // A remote is watched while at least one session refers to it.
  // incarnation: the remote's, when already known (else 0).
  void add(const NetAddr& addr, uint64_t incarnation);
  void release(const NetAddr& addr);

  // A valid message (not a kProbeResp) from `from`: with the known
  // incarnation it proves the remote alive; with another one it starts a
  // probe of that address (unless one is outstanding) and changes nothing
  // else until the probe is answered.
  void on_message(const NetAddr& from, uint64_t incarnation);
  // True when `from` is watched with a known incarnation other than this
  // one: until a probe settles it, its requests may be forged.
  bool disputed(const NetAddr& from, uint64_t incarnation) const;
  // A kProbeResp: decides the remote's incarnation if it echoes the nonce
  // of the probe outstanding to `from`; dropped and counted otherwise.
  void on_probe_resp(const SmMsg& msg, const NetAddr& from);

  // Every heartbeat interval: heartbeats, and silence declared as failure.
  void on_heartbeat_tick();
  // Every retry interval: probes retransmitted or given up.
  void on_retry_tick();

 private:
  struct Remote {
    NetAddr addr;
    size_t refs = 0;
    uint64_t incarnation = 0;  // 0 until heard from
    Clock::time_point last_heard;
    // Outstanding probe of the remote's incarnation: its nonce, 0 if none.
    uint64_t probe_nonce = 0;
    Clock::time_point probe_next_retry;
    Clock::time_point probe_deadline;
  };

  void declare_failed(Remote& r);
  void start_probe(Remote& r);
  void send_probe(const Remote& r);

  SmThreadStats& stats_;
  Send send_;
  Failed failed_;
  Timing timing_;
  Now now_;
  std::unordered_map<uint64_t, Remote> remotes_;  // by NetAddr::key()
};

}  // namespace rpc::detail
