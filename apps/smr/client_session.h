// SmrClient: the client side of the smr key-value service. Sends each
// command to the replica it believes leads, follows "not leader, try X"
// answers, and moves on to the next replica when one does not answer.
// Asynchronous (many commands in flight from one thread); poll() drives it
// together with the Rpc's event loop.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>

#include "kv_proto.h"
#include "librpc/rpc_all.h"

namespace smr {

// How one command ended.
enum class Outcome : uint8_t {
  kOk,       // applied; reply holds the result
  kFailed,   // certainly not applied (deadline passed on refusals only)
  kUnknown,  // may or may not have been applied (lost leadership, timeout)
};

class SmrClient {
 public:
  using Done = std::function<void(Outcome, const KvReply&)>;
  SmrClient(rpc::Rpc& rpc, std::map<uint64_t, std::string> replicas,
            std::chrono::milliseconds attempt_timeout, std::chrono::milliseconds deadline);
  ~SmrClient();
  SmrClient(const SmrClient&) = delete;
  SmrClient& operator=(const SmrClient&) = delete;

  // Starts the command; `done` runs once, from poll() or the event loop.
  // A command answered "unknown" (or not at all) is not sent again: whether
  // to retry is the caller's choice, since it may have been applied.
  void submit(KvCommand cmd, Done done);
  // Resends what waits for a retry. Call it with the event loop.
  void poll();
  void on_session_event(rpc::SessionNum sn, rpc::SessionEvent event);
  size_t in_flight() const { return in_flight_; }
  uint64_t leader() const { return leader_; }
  uint64_t redirects() const { return redirects_; }

 private:
  struct Op;
  struct Replica {
    std::string address;
    rpc::SessionNum session = rpc::kInvalidSessionNum;
    bool failed = false;
  };
  void send(Op* op);
  void retry_later(Op* op, uint64_t next_replica);
  void finish(Op* op, Outcome outcome, const KvReply& reply);
  rpc::SessionNum session_to(uint64_t id);
  uint64_t next_after(uint64_t id) const;

  rpc::Rpc& rpc_;
  std::map<uint64_t, Replica> replicas_;
  std::chrono::milliseconds attempt_timeout_;
  std::chrono::milliseconds deadline_;
  uint64_t leader_ = 0;  // 0: unknown
  std::deque<std::pair<std::chrono::steady_clock::time_point, Op*>> retries_;
  size_t in_flight_ = 0;
  uint64_t redirects_ = 0;
};

}  // namespace smr
