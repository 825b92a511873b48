// Background handlers: the request is copied out of the RX ring, the
// handler runs on a Nexus thread, and its response comes back to the Rpc
// thread through a queue.
#include "nexus/nexus_impl.h"
#include "rpc/rpc_impl.h"

namespace rpc::detail {

void RpcImpl::submit_background(Session& session, ServerSlot& slot, const HandlerEntry& entry) {
  (void)session;
  ReqHandleAccess::set_background(slot.handle, true);
  std::atomic<uint64_t>& state = ReqHandleAccess::bg_state(slot.handle);
  const uint64_t run = (state.load(std::memory_order_relaxed) >> 1) + 1;
  state.store(run << 1, std::memory_order_release);
  bg_inflight_.fetch_add(1, std::memory_order_acq_rel);
  nexus_.submit_background(BgWork{&entry, &slot.handle, this, run});
}

void RpcImpl::poll_bg_responses() {
  bg_mailbox_.take_all(bg_local_);
  // The handle stays marked background until its slot's next request: a
  // late second call from the handler's thread must still take the checked
  // path above, not this thread's.
  for (BgResponse& r : bg_local_) {
    MsgBuffer& pre_resp = ReqHandleAccess::pre_resp(*r.handle);
    if (r.handler_failed) {
      pre_resp.resize(0);
      apply_response(*r.handle, pre_resp, RespStatus::kHandlerFailed);
    } else if (MsgBufferAccess::raw(r.resp) == MsgBufferAccess::raw(pre_resp)) {
      pre_resp = r.resp;  // carries the handler's resize
      apply_response(*r.handle, pre_resp, r.status);
    } else {
      apply_response(*r.handle, r.resp, r.status);
    }
  }
}

// On a background thread. An exception is the handler's way of failing:
// unless it responded first, the client gets kHandlerFailed.
void RpcImpl::run_background_handler(const HandlerEntry& entry, ReqHandle& handle,
                                     uint64_t run) noexcept {
  try {
    entry.fn(handle);
  } catch (...) {
    handler_exceptions_.fetch_add(1, std::memory_order_relaxed);
    // Only if this very run has not responded: after a response the slot
    // may already hold the next request (another run number).
    uint64_t unanswered = run << 1;
    if (ReqHandleAccess::bg_state(handle).compare_exchange_strong(unanswered, unanswered | 1,
                                                                  std::memory_order_acq_rel)) {
      bg_mailbox_.post(BgResponse{&handle, MsgBuffer(), true});
    }
  }
  bg_inflight_.fetch_sub(1, std::memory_order_acq_rel);
}

}  // namespace rpc::detail
