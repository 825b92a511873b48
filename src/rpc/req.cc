// Requests: the client queues and sends them within its credits; the server
// assembles request packets and runs the handler once per request.
#include <algorithm>

#include "common/clock.h"
#include "common/log.h"
#include "nexus/nexus_impl.h"
#include "rpc/rpc_impl.h"

namespace rpc::detail {

// ---------------------------------------------------------------- client

// The continuation is installed into its slot (or backlog entry) where it
// will live: no temporary Callback to move on the way.
Errc RpcImpl::enqueue_request(SessionNum sn, ReqType req_type, MsgBuffer& req, MsgBuffer& resp,
                              Continuation cont, void* tag) noexcept {
  return enqueue(
      sn, req_type, req, resp, cont != nullptr, [cont](ContinuationFn& dst) { dst.emplace(cont); },
      tag, std::chrono::microseconds(0), nullptr);
}

Errc RpcImpl::enqueue_request(SessionNum sn, ReqType req_type, MsgBuffer& req, MsgBuffer& resp,
                              ContinuationFn&& cont, std::chrono::microseconds timeout,
                              RequestId* id_out) noexcept {
  return enqueue(
      sn, req_type, req, resp, static_cast<bool>(cont),
      [&cont](ContinuationFn& dst) { dst = std::move(cont); }, nullptr, timeout, id_out);
}

template <typename Install>
Errc RpcImpl::enqueue(SessionNum sn, ReqType req_type, MsgBuffer& req, MsgBuffer& resp,
                      bool has_cont, Install&& install, void* tag,
                      std::chrono::microseconds timeout, RequestId* id_out) noexcept {
  RPC_CHECK_OWNER("enqueue_request");
  Session* const found = sn < sessions_.size() ? sessions_[sn].get() : nullptr;
  if (destroying_ || found == nullptr) return Errc::kInvalidSession;
  Session& session = *found;
  // Only a session that will send it: a connecting one queues it.
  if (!session.is_client() ||
      (!session.is_connected() && session.state != SessionState::kConnecting)) {
    return Errc::kInvalidSession;
  }
  if (!req.valid() || !resp.valid() || !has_cont || timeout.count() < 0) {
    return Errc::kInvalidArgument;
  }
  if (req.size() > max_msg_size_) return Errc::kMsgTooLarge;

  // Outside the event loop the app may have been away for longer than an
  // RTO: a stale clock would make the new request look lost at once. Inside
  // it (a continuation or handler sending the next request) the loop read
  // the clock this iteration; an iteration long enough to matter makes the
  // next one skip its loss scan (loop_was_away), as eRPC reuses its loop's
  // timestamp too.
  if (!in_event_loop_) now_ns_ = read_clock();
  const uint64_t id = uint64_t{sn} << 48 | next_request_seq_;
  next_request_seq_ = (next_request_seq_ + 1) & ((uint64_t{1} << 48) - 1);
  if (next_request_seq_ == 0) next_request_seq_ = 1;
  if (id_out != nullptr) *id_out = RequestId{id};
  // Clamped to a year: far enough to mean "none in practice", near enough
  // not to overflow.
  constexpr int64_t kMaxTimeoutUs = int64_t{365} * 24 * 3600 * 1000000;
  const uint64_t deadline_ns =
      timeout.count() == 0
          ? 0
          : now_ns_ + static_cast<uint64_t>(std::min(timeout.count(), kMaxTimeoutUs)) * 1000;
  if (session.is_connected() && session.backlog.empty()) {
    ClientSlot* free_slot = lowest_free_client_slot(session);
    if (free_slot != nullptr) {
      hold_views(req, resp);
      install(free_slot->cont);
      start_request(*free_slot, req_type, req, resp, tag, id, deadline_ns);
      flush_if_outside_loop();
      return Errc::kOk;
    }
  }
  // Window full, or not yet connected: wait in order. Allocates (a vector
  // block) only now and then.
  if (deadline_ns != 0) session.backlog_deadlines++;
  hold_views(req, resp);
  BacklogEntry entry{req_type, &req, &resp, nullptr, tag, id, deadline_ns};
  install(entry.cont);
  session.backlog.push_back(std::move(entry));
  return Errc::kOk;
}

void RpcImpl::start_request(ClientSlot& slot, BacklogEntry&& entry) {
  slot.cont = std::move(entry.cont);
  start_request(slot, entry.req_type, *entry.req, *entry.resp, entry.tag, entry.request_id,
                entry.deadline_ns);
}

// REQUIRES: slot.cont already holds the request's continuation.
void RpcImpl::start_request(ClientSlot& slot, ReqType req_type, MsgBuffer& req, MsgBuffer& resp,
                            void* tag, uint64_t request_id, uint64_t deadline_ns) {
  RPC_ASSERT(!slot.active, "a request starts in a free slot");
  slot.active = true;
  slot.session->busy_cslots |= slot_bit(slot.next_req_num);
  slot.req_type = req_type;
  slot.req = &req;
  slot.resp = &resp;
  slot.tag = tag;
  slot.request_id = request_id;
  slot.deadline_ns = deadline_ns;
  slot.pending_end = Errc::kOk;
  slot.req_num = slot.next_req_num;
  slot.next_req_num = (slot.next_req_num + kSessionReqWindow) & kReqNumMask;
  slot.bulk_req =
      use_bulk(req.size()) && expose_payload(*slot.session, slot.bulk_ctrl, req, slot.req_exposure);
  slot.bulk_read = kNoBulkRead;
  slot.req_pkts = slot.bulk_req ? 1 : req.num_pkts();
  slot.resp_pkts = 0;
  slot.num_tx = 0;
  slot.num_rx = 0;
  slot.rtt_sample_index = kNoSample;
  slot.tx_high = 0;
  slot.rolled_back_tx = 0;
  slot.rto_backoff = 0;
  slot.progress_ns = now_ns_;
  slot.rx_progress_ns = now_ns_;
  slot.rx_high = 0;
  client_try_send(slot);
}

void RpcImpl::client_try_send(ClientSlot& slot) {
  Session& session = *slot.session;
  for (;;) {
    size_t next = slot.num_tx;
    const bool is_req_pkt = next < slot.req_pkts;
    // RFRs need the response size, learned from response packet 0.
    if (!is_req_pkt && (slot.resp_pkts == 0 || next >= slot.req_pkts + slot.resp_pkts - 1)) {
      return;
    }
    if (session.credits == 0) {
      if (!slot.in_stall_queue) {
        slot.in_stall_queue = true;
        stall_queue_.push_back(&slot);
      }
      return;
    }
    // A bulk request's control packet is not paced: its payload moves by
    // one-sided read, which Timely does not pace, and its answer feeds no
    // Timely sample (credits.cc), so a session that only moves bulk
    // messages would otherwise stay at a rate cut by a timeout for good.
    // Its RFRs (a response sent as datagrams) are paced as any.
    if (wheel_ != nullptr && !session.timely.uncongested() && !(is_req_pkt && slot.bulk_req) &&
        !pace(slot)) [[unlikely]] {
      return;
    }
    session.credits--;
    if (slot.num_tx == slot.tx_high) {  // a first send: time it if nothing is being timed
      if (slot.rtt_sample_index == kNoSample) {
        slot.rtt_sample_index = slot.num_tx;
        slot.rtt_sample_sent_ns = now_ns_;
      }
      slot.tx_high++;
    }
    slot.num_tx++;
    slot.progress_ns = now_ns_;
    if (is_req_pkt) {
      send_req_pkt(slot, next);
    } else {
      send_rfr(slot, next - slot.req_pkts + 1);
    }
  }
}

void RpcImpl::send_req_pkt(ClientSlot& slot, size_t pkt_num) {
  Session& session = *slot.session;
  MsgBuffer& req = *slot.req;
  const auto pkt16 = static_cast<uint16_t>(pkt_num);
  const auto size = static_cast<uint32_t>(req.size());
  if (slot.bulk_req) {
    uint8_t* hdr = MsgBufferAccess::hdr(slot.bulk_ctrl, 0);
    PktHdr::make(PktType::kReq, slot.req_type, size, session.remote_num, 0, slot.req_num, true)
        .store(hdr);
    tx_msg_pkt(slot.bulk_ctrl, 0, session);
    return;
  }
  uint8_t* hdr = MsgBufferAccess::hdr(req, pkt_num);
  PktHdr::make(PktType::kReq, slot.req_type, size, session.remote_num, pkt16, slot.req_num)
      .store(hdr);
  tx_msg_pkt(req, pkt_num, session);
}

void RpcImpl::process_stall_queue() {
  // A slot that runs out of credits again re-appends itself; handle only the
  // entries present now (by index: push_back may reallocate).
  const size_t n = stall_queue_.size();
  for (size_t i = 0; i < n; i++) {
    ClientSlot* slot = stall_queue_[i];
    slot->in_stall_queue = false;
    if (slot->active) client_try_send(*slot);
  }
  stall_queue_.erase(stall_queue_.begin(), stall_queue_.begin() + static_cast<ptrdiff_t>(n));
}

// ---------------------------------------------------------------- server

void RpcImpl::server_process_req(Session& session, const PktHdr& hdr, uint8_t* pkt,
                                 size_t data_len) {
  const size_t slot_index = hdr.req_num() % kSessionReqWindow;
  if (!session.sslots.has(slot_index)) [[unlikely]]
    alloc_server_slots(session, slot_index);
  ServerSlot& slot = session.sslots[slot_index];
  const uint64_t req_num = hdr.req_num();
  const int64_t ahead = req_num_diff(req_num, slot.req_num);
  if (slot.has_req && ahead < 0) {
    stats_.drops.stale++;
    return;
  }
  if (!slot.has_req || ahead > 0) {
    // A client starts request R + kSessionReqWindow of a slot only after R
    // completed, so a new request carries the next number, or a later one
    // when the client gave requests up (cancel, deadline) that never
    // reached us. Far further ahead is forged or corrupt: taking it would
    // make every real request of the slot look stale from then on.
    const uint64_t expected =
        slot.has_req ? (slot.req_num + kSessionReqWindow) & kReqNumMask : slot.req_num;
    const int64_t skipped = req_num_diff(req_num, expected);
    if (skipped < 0 || static_cast<uint64_t>(skipped) > kMaxReqsGivenUp * kSessionReqWindow) {
      stats_.drops.out_of_order++;
      return;
    }
    if (hdr.pkt_num() != 0) {  // the start of a new request was lost
      stats_.drops.out_of_order++;
      // or this one was dropped in part, and the notice may have been lost
      if (slot.abandoned && req_num == slot.req_num) {
        tx_restart_notice(session, hdr.req_type(), req_num);
      }
      return;
    }
    server_new_req(session, slot, hdr, pkt, data_len);
    return;
  }
  const size_t pkt_num = hdr.pkt_num();
  const bool last_pkt = pkt_num + 1 == slot.req_pkts;
  switch (slot.state) {
    case ServerSlotState::kReceiving:
      // Every packet of a request repeats its msg_size; a packet that claims
      // another size would write past the buffer sized from packet 0.
      if (hdr.msg_size() != slot.req_buf.size()) {
        stats_.drops.bad_header++;
        return;
      }
      if (pkt_num == slot.req_rx) {
        std::copy_n(pkt + kPktHeaderBytes, data_len,
                    slot.req_buf.data() + pkt_num * caps_.max_data_per_pkt);
        stats_.payload_bytes_copied += data_len;
        slot.req_rx++;
        slot.rx_progress_ns = now_ns_;
        if (last_pkt) {
          invoke_handler_on_req_buf(session, slot, hdr.req_type());
        } else {
          tx_credit_return(session, hdr.req_type(), hdr.pkt_num(), req_num);
        }
      } else if (pkt_num < slot.req_rx) {  // our credit return was lost
        stats_.drops.stale++;
        tx_credit_return(session, hdr.req_type(), hdr.pkt_num(), req_num);
      } else {
        stats_.drops.out_of_order++;
      }
      return;
    case ServerSlotState::kResponded:
      if (last_pkt) {  // the response was lost: answer from the cache
        stats_.duplicate_requests++;
        server_send_resp_pkt(session, slot, 0);
        return;
      }
      [[fallthrough]];
    case ServerSlotState::kBulkReading:
    case ServerSlotState::kInHandler:
      if (!last_pkt) {
        stats_.drops.stale++;
        tx_credit_return(session, hdr.req_type(), hdr.pkt_num(), req_num);
      } else {
        stats_.drops.busy++;  // the response is on its way
      }
      return;
    case ServerSlotState::kIdle:
      stats_.drops.stale++;
      return;
  }
}

void RpcImpl::set_slot_state(ServerSlot& slot, ServerSlotState to) {
  RPC_ASSERT(slot_transition_ok(slot.state, to), "illegal server slot state transition");
  slot.state = to;
}

// Request buffers come out of the receive budget: a peer cannot make this
// Rpc hold more than rx_budget_per_session_bytes per session,
// rx_budget_per_host_bytes per remote host and rx_budget_per_rpc_bytes in
// all, whatever sizes its first packets claim.
bool RpcImpl::alloc_req_buf(Session& session, ServerSlot& slot, size_t size) {
  const size_t bytes = std::max<size_t>(size, 1);
  // A refusal is what lets the loss scan drop stale requests received in
  // part, and settled responses, to make room (scan_server_session): never
  // time alone.
  if (session.rx_budget_bytes + bytes > rx_budget_per_session_bytes_) {
    session.rx_budget_refused_ns = now_ns_;
    stats_.drops.rx_budget++;
    return false;
  }
  if (!budget_admits(session, bytes)) return false;
  slot.req_buf = alloc_msg_buffer(size);
  if (!slot.req_buf.valid()) {
    stats_.drops.out_of_memory++;
    return false;
  }
  slot.owns_req_buf = true;
  slot.rx_budget_bytes = bytes;
  session.rx_budget_bytes += bytes;
  session.host->budget_bytes += bytes;
  rx_budget_used_bytes_ += bytes;
  return true;
}

// Whether the session's host and the Rpc have room for `bytes` more (0: a
// new request, which must find them under budget); a refusal is recorded
// for the loss scan (scan_server_session) and counted.
bool RpcImpl::budget_admits(Session& session, size_t bytes) {
  RemoteHost& host = *session.host;
  if (host.budget_bytes + bytes > rx_budget_per_host_bytes_ ||
      (bytes == 0 && host.budget_bytes >= rx_budget_per_host_bytes_)) {
    host.refused_ns = now_ns_;
    stats_.drops.rx_budget++;
    return false;
  }
  if (rx_budget_used_bytes_ + bytes > rx_budget_per_rpc_bytes_ ||
      (bytes == 0 && rx_budget_used_bytes_ >= rx_budget_per_rpc_bytes_)) {
    rx_budget_refused_ns_ = now_ns_;
    stats_.drops.rx_budget++;
    return false;
  }
  return true;
}

void RpcImpl::free_owned_req_buf(ServerSlot& slot) {
  free_msg_buffer(slot.req_buf);
  slot.owns_req_buf = false;
  slot.session->rx_budget_bytes -= slot.rx_budget_bytes;
  slot.session->host->budget_bytes -= slot.rx_budget_bytes;
  rx_budget_used_bytes_ -= slot.rx_budget_bytes;
  slot.rx_budget_bytes = 0;
  slot.req_buf = MsgBuffer();
}

// A stale request received in part, dropped to make room for others
// (scan_server_session): its buffer goes back to the budget, and its
// client is told to send it again from packet 0 (the slot expects the same
// request number again), now and for each later packet of it that
// arrives, since the notice may be lost.
void RpcImpl::abandon_partial_request(Session& session, ServerSlot& slot) {
  stats_.partial_requests_abandoned++;
  release_server_slot(slot);
  slot.has_req = false;
  slot.abandoned = true;
  set_slot_state(slot, ServerSlotState::kIdle);
  tx_restart_notice(session, slot.handle.req_type(), slot.req_num);
}

void RpcImpl::server_new_req(Session& session, ServerSlot& slot, const PktHdr& hdr, uint8_t* pkt,
                             size_t data_len) {
  // The client moved on, so it has the previous request's answer or gave up
  // on it. A handler that still holds the slot (deferred) must respond
  // first; an unfinished receive or bulk read is simply abandoned.
  if (slot.state == ServerSlotState::kInHandler) {
    stats_.drops.busy++;
    return;
  }
  if (!ensure_slot_buffers(slot)) [[unlikely]] {  // the client retries
    stats_.drops.out_of_memory++;
    return;
  }
  release_server_slot(slot);
  set_slot_state(slot, ServerSlotState::kIdle);
  slot.has_req = true;
  slot.abandoned = false;
  slot.req_num = hdr.req_num();
  // Nothing new while the client's host or the Rpc holds its budget or
  // more, whatever the request's size: even a one-packet request may get a
  // large response (a GET), charged when the handler gives it. (Two
  // comparisons inline; budget_admits stamps and counts the refusal.)
  if ((session.host->budget_bytes >= rx_budget_per_host_bytes_ ||
       rx_budget_used_bytes_ >= rx_budget_per_rpc_bytes_) &&
      !budget_admits(session, 0)) [[unlikely]] {  // the client retries
    slot.has_req = false;
    return;
  }
  ReqHandleAccess::set_req_type(slot.handle, hdr.req_type());
  slot.req_rx = 0;
  slot.rx_progress_ns = now_ns_;
  const uint32_t msg_size = hdr.msg_size();
  if (hdr.bulk()) {
    slot.req_pkts = 1;
    server_start_bulk_read(session, slot, msg_size, pkt + kPktHeaderBytes);
    return;
  }
  const size_t dpp = caps_.max_data_per_pkt;
  slot.req_pkts = pkts_for_size(msg_size, dpp);
  const HandlerEntry& entry = (*handlers_)[hdr.req_type()];
  if (slot.req_pkts == 1 && entry.mode == HandlerMode::kForeground && !entry.keeps_request) {
    // Zero copy: the handler reads the request straight from the RX ring
    // (the view lives in the handle only; the slot's req_buf holds owned
    // buffers alone).
    MsgBufferAccess::set_view(ReqHandleAccess::req(slot.handle), pkt, msg_size,
                              caps_.max_data_per_pkt);
    slot.req_rx = 1;
    invoke_handler(session, slot, hdr.req_type());
    return;
  }
  if (!alloc_req_buf(session, slot,
                     msg_size)) {  // over budget or out of memory: the client retries
    slot.has_req = false;
    return;
  }
  std::copy_n(pkt + kPktHeaderBytes, data_len, slot.req_buf.data());
  stats_.payload_bytes_copied += data_len;
  slot.req_rx = 1;
  if (slot.req_pkts == 1) {
    invoke_handler_on_req_buf(session, slot, hdr.req_type());
    return;
  }
  set_slot_state(slot, ServerSlotState::kReceiving);
  slot.rx_start_ns = now_ns_;
  tx_credit_return(session, hdr.req_type(), 0, slot.req_num);
}

void RpcImpl::invoke_handler(Session& session, ServerSlot& slot, ReqType req_type) {
  set_slot_state(slot, ServerSlotState::kInHandler);
  ReqHandle& handle = slot.handle;
  ReqHandleAccess::set_req_type(handle, req_type);
  ReqHandleAccess::set_background(handle, false);
  MsgBuffer& pre_resp = ReqHandleAccess::pre_resp(handle);
  pre_resp.resize(pre_resp.max_size());
  const HandlerEntry& entry = (*handlers_)[req_type];
  session.pending_handlers++;
  if (!entry.registered) {
    // Answer with an empty "no handler" response so the client fails fast.
    pre_resp.resize(0);
    apply_response(handle, pre_resp, RespStatus::kNoHandler);
    return;
  }
  stats_.handlers_run++;
  if (entry.mode == HandlerMode::kBackground) {
    submit_background(session, slot, entry);
    return;
  }
  // The slot is found again by number afterwards: the handler may have
  // responded, and that may have freed a draining session.
  const SessionNum sn = session.local_num;
  const size_t slot_index = slot.req_num % kSessionReqWindow;
  const uint64_t req_num = slot.req_num;
  try {
    entry.fn(handle);
  } catch (const std::exception& e) {
    handler_failed(sn, slot_index, req_num, e.what());
  } catch (...) {
    handler_failed(sn, slot_index, req_num, "an exception not derived from std::exception");
  }
}

// A handler threw. If it had not responded yet, the client is told with
// kHandlerFailed (an empty response); either way the Rpc carries on.
void RpcImpl::handler_failed(SessionNum sn, size_t slot_index, uint64_t req_num, const char* what) {
  handler_exceptions_.fetch_add(1, std::memory_order_relaxed);
  RPC_LOG_WARN("Rpc {}: a handler threw: {}", config_.rpc_id, what);
  Session* s = sn < sessions_.size() ? sessions_[sn].get() : nullptr;
  // The session may have ended during the handler and its number gone to a
  // new session (a client one, or a server one with no slots yet).
  if (s == nullptr || s->is_client() || !s->sslots.has(slot_index)) return;
  ServerSlot& slot = s->sslots[slot_index];
  if (slot.state != ServerSlotState::kInHandler || slot.req_num != req_num) return;
  MsgBuffer& pre_resp = ReqHandleAccess::pre_resp(slot.handle);
  pre_resp.resize(0);
  apply_response(slot.handle, pre_resp, RespStatus::kHandlerFailed);
}

}  // namespace rpc::detail
