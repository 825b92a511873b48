// ReqHandle: what a server-side handler receives for one request.
#pragma once

#include <atomic>

#include "librpc/msg_buffer.h"
#include "librpc/types.h"

namespace rpc {

class Rpc;
namespace detail {
struct ServerSlot;
struct ReqHandleAccess;
}  // namespace detail

class RPC_EXPORT ReqHandle {
 public:
  ReqHandle(const ReqHandle&) = delete;
  ReqHandle& operator=(const ReqHandle&) = delete;

  // The request. For a single-packet request run by a foreground handler
  // the data lives in the RX ring (zero copy) and is valid only until the
  // handler returns: a handler that responds later must copy what it needs.
  // Otherwise it is valid until enqueue_response().
  const MsgBuffer& request() const { return req_; }
  ReqType req_type() const { return req_type_; }
  // A response buffer of one packet's data size, preallocated by the Rpc.
  // Fill it, resize() it and pass it to Rpc::enqueue_response(). For larger
  // responses allocate a buffer with Rpc::alloc_msg_buffer() instead.
  MsgBuffer& pre_resp_buffer() { return pre_resp_; }
  // The Rpc that received the request.
  Rpc& rpc() { return *rpc_; }
  // RpcConfig::context of that Rpc.
  void* context() const { return context_; }
  // True when the handler runs on a Nexus background thread.
  bool is_background() const { return is_background_; }

 private:
  friend struct detail::ReqHandleAccess;
  friend struct detail::ServerSlot;
  ReqHandle() = default;

  Rpc* rpc_ = nullptr;
  void* context_ = nullptr;
  detail::ServerSlot* slot_ = nullptr;
  MsgBuffer req_;
  MsgBuffer pre_resp_;
  ReqType req_type_ = 0;
  bool is_background_ = false;
  // Background handlers: (run number << 1) | responded. Set by the first
  // enqueue_response of a run, so a second one is refused (it may come from
  // any thread), and tied to the run, so a late call of an old run cannot
  // answer the slot's next request.
  std::atomic<uint64_t> bg_state_{0};
};

}  // namespace rpc
