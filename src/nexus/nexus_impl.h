// Per-process state behind rpc::Nexus: handler table, Rpc registry, the
// session-management thread and the background handler threads.
#pragma once

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "common/net_addr.h"
#include "librpc/nexus.h"
#include "wire/sm_msg.h"

namespace rpc::detail {

class RpcEndpoint;
class SmThread;
struct SmThreadStats;
class BgThreads;

struct HandlerEntry {
  ReqHandler fn;
  HandlerMode mode = HandlerMode::kForeground;
  bool registered = false;
  // The handler keeps the request past its return (a coroutine): a
  // single-packet request is copied out of the RX ring for it.
  bool keeps_request = false;
};

// Work for a background thread: run handler on handle, then tell rpc.
struct BgWork {
  const HandlerEntry* entry;
  ReqHandle* handle;
  RpcEndpoint* rpc;
  uint64_t run;  // the handle's background run number (see ReqHandle::bg_state_)
};

class NexusImpl {
 public:
  explicit NexusImpl(const NexusConfig& config);
  // REQUIRES: every Rpc of this Nexus was destroyed. Checked in every build:
  // aborts with a message naming the live rpc_ids (they point at this
  // Nexus and would use it after it is freed).
  ~NexusImpl();

  Result<void> register_handler(ReqType req_type, ReqHandler handler, HandlerMode mode,
                                bool keeps_request = false);
  // Freezes the handler table (first Rpc) and returns it.
  const std::array<HandlerEntry, 256>& freeze_handlers();

  // Registry of Rpcs by rpc_id. register_rpc fails if taken.
  Result<void> register_rpc(RpcId id, RpcEndpoint* rpc);
  void unregister_rpc(RpcId id);
  // Calls rpc->sm_deliver(msg, from) under the registry lock; false if no
  // Rpc has that id.
  bool deliver_to_rpc(RpcId id, const SmMsg& msg, const NetAddr& from);
  // Tells every Rpc that the remote Nexus at addr, in that incarnation, failed.
  void broadcast_remote_failure(const NetAddr& addr, uint64_t incarnation);
  // Sessions refer to remote Nexuses: watched by heartbeats while referred to.
  void add_remote(const NetAddr& remote, uint64_t incarnation);
  void release_remote(const NetAddr& remote);
  uint64_t incarnation() const { return incarnation_; }

  // Session management, callable from any thread. Requests are
  // retransmitted until a response with the same token arrives (delivered
  // to Rpc local_rpc_id) or the timeout passes (a synthesized response with
  // SmErr::kTimeout is delivered instead).
  void sm_send_request(const SmMsg& msg, const NetAddr& to);
  void sm_send_response(const SmMsg& msg, const NetAddr& to);
  // A kSessionResetReq from a server Rpc that is being destroyed, to the
  // client end of one of its sessions. Retransmitted like a request until a
  // kSessionResetResp with the same token arrives from `to` or the SM
  // timeout passes; neither is delivered to any Rpc (the sender is gone).
  // Any thread.
  void sm_send_session_reset(const SmMsg& msg, const NetAddr& to);
  // The Rpc that sent the connect request `token` (via sm_send_request) is
  // going away while the connect is outstanding. If a successful answer
  // arrives later, the SM thread sends the disconnect request itself (built
  // from the answer; its response and timeout are consumed by the SM
  // thread); a refusal or a timeout is dropped. Nothing is delivered to the
  // Rpc. An answer already delivered before this call is in the Rpc's queue
  // and remains its business; one arriving after unregister_rpc() finds no
  // Rpc and is disconnected the same way. Any thread.
  void sm_abandon_connect(uint64_t token);
  // Counters of the SM thread (any thread; relaxed reads).
  const SmThreadStats& sm_stats() const;

  void submit_background(const BgWork& work);
  size_t num_bg_threads() const { return config_.num_bg_threads; }

  const NexusConfig& config() const { return config_; }
  const std::string& uri() const { return uri_; }
  const NetAddr& addr() const { return addr_; }

 private:
  NexusConfig config_;
  NetAddr addr_;
  uint64_t incarnation_ = 0;
  std::string uri_;
  std::array<HandlerEntry, 256> handlers_;
  std::atomic<bool> handlers_frozen_{false};
  std::mutex registry_mutex_;
  std::array<RpcEndpoint*, 256> rpcs_{};
  std::unique_ptr<SmThread> sm_thread_;
  std::unique_ptr<BgThreads> bg_threads_;
};

}  // namespace rpc::detail
