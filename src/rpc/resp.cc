// Responses: the server sends packet 0 unprompted and the rest on request
// (RFR), and keeps the response cached until the slot's next request; the
// client assembles it and completes the request.
#include <algorithm>

#include "common/log.h"
#include "rpc/rpc_impl.h"

namespace rpc::detail {

// ---------------------------------------------------------------- server

// Two entry points, so that the common one (a response from the Rpc's
// thread) stays a direct path into apply_response.
void RpcImpl::enqueue_response(ReqHandle& handle, MsgBuffer& resp) noexcept {
  if (handle.is_background()) return post_bg_response(handle, resp, RespStatus::kOk);
  RPC_CHECK_OWNER("enqueue_response");
  if (destroying_) [[unlikely]]
    return;  // ~Rpc: its clients' sessions are being reset
  apply_response(handle, resp, RespStatus::kOk);
  flush_if_outside_loop();
}

void RpcImpl::enqueue_error_response(ReqHandle& handle, MsgBuffer& pre_resp) noexcept {
  if (handle.is_background()) return post_bg_response(handle, pre_resp, RespStatus::kAppError);
  RPC_CHECK_OWNER("enqueue_error_response");
  if (destroying_) [[unlikely]]
    return;
  apply_response(handle, pre_resp, RespStatus::kAppError);
  flush_if_outside_loop();
}

// Called on a background thread (or any thread): hand the response to the
// Rpc thread. The flag is the one thing every thread may touch.
void RpcImpl::post_bg_response(ReqHandle& handle, MsgBuffer& resp, RespStatus status) {
  {
    std::atomic<uint64_t>& state = ReqHandleAccess::bg_state(handle);
    uint64_t cur = state.load(std::memory_order_acquire);
    do {
      RPC_CHECK_USAGE((cur & 1) == 0,
                      "Rpc {}: enqueue_response called twice for one request (a background "
                      "handler's handle)",
                      config_.rpc_id);
    } while (!state.compare_exchange_weak(cur, cur | 1, std::memory_order_acq_rel));
    bg_mailbox_.post(BgResponse{&handle, resp, false, status});
  }
}

// The one way a server slot leaves kInHandler. Refuses (loudly) a handle
// that is not waiting for a response: a second response would free a
// buffer twice and unbalance the session's handler count.
void RpcImpl::apply_response(ReqHandle& handle, MsgBuffer& resp, RespStatus status) {
  ServerSlot* slot_ptr = ReqHandleAccess::slot(handle);
  RPC_CHECK_USAGE(slot_ptr != nullptr && slot_ptr->state == ServerSlotState::kInHandler &&
                      &slot_ptr->handle == &handle,
                  "Rpc {}: enqueue_response for a request that is not waiting for a response "
                  "(a second response for one request, or a handle that is not a handler's)",
                  config_.rpc_id);
  ServerSlot& slot = *slot_ptr;
  Session& session = *slot.session;
  MsgBuffer& pre_resp = ReqHandleAccess::pre_resp(handle);
  if (&resp == &pre_resp || MsgBufferAccess::raw(resp) == MsgBufferAccess::raw(pre_resp)) {
    // Pick up a resize done on a copy of the handle (a 64-byte copy onto
    // itself in the common case, where the handler resized pre_resp).
    if (&resp != &pre_resp) pre_resp = resp;
    slot.resp = &pre_resp;
  } else {
    free_dyn_resp(slot);
    // A view of application memory stays the engine's until the response
    // is dropped (free_dyn_resp): checked and counted here.
    if (resp.is_app_view()) [[unlikely]]
      hold_view(resp, "enqueue_response");
    slot.dyn_resp = resp;  // the Rpc owns it now
    slot.resp = &slot.dyn_resp;
    // Kept until the slot's next request, for a client that asks again:
    // what it holds is charged to the client's host and the Rpc (never
    // refused: the request was taken), and new requests wait while they
    // are over budget (server_new_req).
    slot.resp_budget_bytes = std::max<size_t>(resp.max_size(), 1);
    session.host->budget_bytes += slot.resp_budget_bytes;
    rx_budget_used_bytes_ += slot.resp_budget_bytes;
  }
  slot.status = static_cast<uint8_t>(status);
  // The request buffer is no longer needed (a zero-copy view was never in
  // the slot, and dies with the RX burst).
  free_req_buf(slot);
  ReqHandleAccess::req(handle) = MsgBuffer();
  set_slot_state(slot, ServerSlotState::kResponded);
  slot.resp_bulk = use_bulk(slot.resp->size()) &&
                   expose_payload(session, slot.bulk_ctrl, *slot.resp, slot.resp_exposure);
  // The client is gone: nothing to send, and the last pending handler
  // frees the session, so read the state before.
  const bool draining = session.state == SessionState::kDraining;
  finish_pending_handler(session);
  if (draining || !session.is_connected()) return;
  server_send_resp_pkt(session, slot, 0);
}

void RpcImpl::finish_pending_handler(Session& session) {
  RPC_ASSERT(session.pending_handlers > 0, "a response without a pending handler");
  session.pending_handlers--;
  if (session.state == SessionState::kDraining && session.pending_handlers == 0) {
    free_session(session);
  }
}

// Out of line: the common path above stays short.
void RpcImpl::send_resp_dropped(Session& session, ServerSlot& slot) {
  tx_ctrl(session, PktHdr::make(PktType::kResp, slot.handle.req_type(), 0, session.remote_num, 0,
                                slot.req_num, false, RespStatus::kResponseDropped));
}

void RpcImpl::server_send_resp_pkt(Session& session, ServerSlot& slot, size_t pkt_num) {
  slot.resp_sent_ns = now_ns_;
  const auto status = static_cast<RespStatus>(slot.status);
  if (status == RespStatus::kResponseDropped) [[unlikely]]  // to make room (pkt_loss.cc)
    return send_resp_dropped(session, slot);
  MsgBuffer& resp = *slot.resp;
  const auto size = static_cast<uint32_t>(resp.size());
  if (slot.resp_bulk) {
    uint8_t* hdr = MsgBufferAccess::hdr(slot.bulk_ctrl, 0);
    PktHdr::make(PktType::kResp, slot.handle.req_type(), size, session.remote_num, 0, slot.req_num,
                 true, status)
        .store(hdr);
    tx_msg_pkt(slot.bulk_ctrl, 0, session);
    return;
  }
  uint8_t* hdr = MsgBufferAccess::hdr(resp, pkt_num);
  PktHdr::make(PktType::kResp, slot.handle.req_type(), size, session.remote_num,
               static_cast<uint16_t>(pkt_num), slot.req_num, false, status)
      .store(hdr);
  tx_msg_pkt(resp, pkt_num, session);
}

// ---------------------------------------------------------------- client

void RpcImpl::client_process_resp(Session& session, const PktHdr& hdr, const uint8_t* data,
                                  size_t data_len) {
  ClientSlot* slot_ptr = client_slot_for(session, hdr.req_num());
  if (slot_ptr == nullptr) {
    check_stale_answer(session, hdr);
    return;
  }
  ClientSlot& slot = *slot_ptr;
  const size_t pkt_num = hdr.pkt_num();
  // The server ran the request but dropped its response to make room: it
  // answers the request or any RFR of it so, whatever we had of it
  // (client_complete gives back the credits of what is in flight).
  if (hdr.status() == RespStatus::kResponseDropped) [[unlikely]] {
    if (slot.num_tx <= slot.req_pkts - 1) {  // not answering anything we sent yet
      stats_.drops.stale++;
      return;
    }
    client_complete(slot, slot.pending_end != Errc::kOk ? slot.pending_end : Errc::kResponseDropped,
                    0);
    return;
  }
  if (!client_accept(slot, slot.req_pkts - 1 + pkt_num)) return;
  if (slot.pending_end != Errc::kOk) [[unlikely]] {  // given up; the server is done reading it
    client_complete(slot, slot.pending_end, 0);
    return;
  }
  const size_t msg_size = hdr.msg_size();
  if (pkt_num == 0) {
    if (hdr.status() == RespStatus::kNoHandler) {
      client_complete(slot, Errc::kNoHandler, 0);
      return;
    }
    if (hdr.status() == RespStatus::kHandlerFailed) {
      client_complete(slot, Errc::kHandlerFailed, 0);
      return;
    }
    if (hdr.status() == RespStatus::kAppError) {  // its shape was checked (header_sane)
      uint32_t code = 0;
      for (size_t i = 0; i < kAppErrorBytes; i++) code |= uint32_t{data[i]} << (8 * i);
      client_complete(slot, Errc::kAppError, 0, code);
      return;
    }
    if (msg_size > slot.resp->max_size()) {
      client_complete(slot, Errc::kRespBufferTooSmall, 0);
      return;
    }
    slot.resp->resize(msg_size);
    if (hdr.bulk()) {
      slot.resp_pkts = 1;
      client_start_bulk_read(session, slot, data);
      return;
    }
    slot.resp_pkts = slot.resp->num_pkts();
  } else if (msg_size != slot.resp->size()) {
    stats_.drops.bad_header++;
    return;
  }
  std::copy_n(data, data_len, slot.resp->data() + pkt_num * caps_.max_data_per_pkt);
  stats_.payload_bytes_copied += data_len;
  if (slot.num_rx == slot.req_pkts + slot.resp_pkts - 1) {
    client_complete(slot, Errc::kOk, msg_size);
    return;
  }
  client_try_send(slot);
}

void RpcImpl::client_complete(ClientSlot& slot, Errc errc, size_t resp_size, uint32_t app_error) {
  Session& session = *slot.session;
  // Packets still in flight for this request come back as stale; their
  // credits are returned now.
  session.credits += slot.num_tx - slot.num_rx;
  slot.active = false;
  session.busy_cslots &= ~slot_bit(slot.req_num);
  if (slot.num_rx != 0) slot.given_up_unheard = 0;  // the server hears this slot
  // A response (answers past the request's credit returns): the server's
  // handler of an earlier request given up in this slot is done too.
  if (session.unheard_cslots != 0 && slot.num_rx >= slot.req_pkts) [[unlikely]] {
    session.unheard_cslots &= ~slot_bit(slot.req_num);
  }
  // The server has read the request (it answered), or never will: the
  // request buffer goes back to the application unexposed.
  if (slot.req_exposure.active()) transport_->revoke_exposure(slot.req_exposure);
  if (errc != Errc::kOk && slot.bulk_read == kNoBulkRead) slot.resp->resize(0);
  const Completion completion{errc, slot.resp, errc == Errc::kOk ? resp_size : 0, slot.tag,
                              app_error};
  // Out of the slot before the next request takes it.
  ContinuationFn cont = std::move(slot.cont);
  session.stats.requests_completed++;
  stats_.requests_completed++;
  // A read still filling the response buffer: the continuation runs when
  // it is done (finish_orphan), never before.
  const bool deferred = slot.bulk_read != kNoBulkRead;
  if (deferred) orphan_client_read(slot, std::move(cont), completion);
  // The engine is done with the request (its exposure ended above) and,
  // unless a read still fills it (finish_orphan), with the response buffer.
  if (slot.req->is_app_view()) [[unlikely]]
    release_view(*slot.req);
  if (!deferred && slot.resp->is_app_view()) [[unlikely]]
    release_view(*slot.resp);
  if (!session.backlog.empty() && session.is_connected()) {
    start_request(slot, take_backlog_front(session));
  }
  if (!deferred) run_continuation(cont, completion);
}

}  // namespace rpc::detail
