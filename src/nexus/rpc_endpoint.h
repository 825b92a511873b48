// What a Nexus needs of the Rpcs registered with it, and nothing more: the
// Nexus (nexus/) sits below the Rpc (rpc/) and must not include it. RpcImpl
// implements this; the Nexus holds RpcEndpoint pointers. Control path only:
// session-management deliveries and background handlers, never a packet.
#pragma once

#include <cstdint>

#include "common/net_addr.h"
#include "librpc/req_handle.h"
#include "wire/sm_msg.h"

namespace rpc::detail {

struct HandlerEntry;

class RpcEndpoint {
 public:
  // SM thread: a session-management message for this Rpc. Queued for the
  // Rpc's thread; requests beyond a bound are dropped (their sender
  // retransmits).
  virtual void sm_deliver(const SmMsg& msg, const NetAddr& from) = 0;
  // SM thread: the Nexus at `remote` failed, or restarted with another
  // incarnation. Queued for the Rpc's thread; never dropped.
  virtual void remote_failed(const NetAddr& remote, uint64_t incarnation) = 0;
  // A background thread: runs `entry` on `handle` (run number `run`) and
  // hands its response, or its failure, to the Rpc's thread.
  virtual void run_background_handler(const HandlerEntry& entry, ReqHandle& handle,
                                      uint64_t run) noexcept = 0;

 protected:
  ~RpcEndpoint() = default;  // never owned through this interface
};

}  // namespace rpc::detail
