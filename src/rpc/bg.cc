// Background handlers: the request is copied out of the RX ring, the
// handler runs on a Nexus thread, and its response comes back to the Rpc
// thread through a queue.
#include "nexus/nexus_impl.h"
#include "rpc/rpc_impl.h"

namespace rpc::detail {

void RpcImpl::submit_background(Session& session, ServerSlot& slot, const HandlerEntry& entry) {
  (void)session;
  ReqHandleAccess::set_background(slot.handle, true);
  bg_inflight_.fetch_add(1, std::memory_order_acq_rel);
  nexus_.submit_background(BgWork{&entry, &slot.handle, this});
}

void RpcImpl::poll_bg_responses() {
  {
    std::lock_guard lock(bg_mutex_);
    bg_local_.swap(bg_queue_);
    bg_pending_.store(false, std::memory_order_release);
  }
  for (BgResponse& r : bg_local_) {
    ReqHandleAccess::set_background(*r.handle, false);
    MsgBuffer& pre_resp = ReqHandleAccess::pre_resp(*r.handle);
    if (MsgBufferAccess::raw(r.resp) == MsgBufferAccess::raw(pre_resp)) {
      pre_resp = r.resp;  // carries the handler's resize
      enqueue_response(*r.handle, pre_resp);
    } else {
      enqueue_response(*r.handle, r.resp);
    }
  }
  bg_local_.clear();
}

void RpcImpl::finish_pending_handler(Session& session) {
  session.pending_handlers--;
  if (session.zombie && session.pending_handlers == 0) free_session(session);
}

}  // namespace rpc::detail
