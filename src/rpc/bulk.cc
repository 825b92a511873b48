// Large messages on transports with one-sided operations: the sender
// exposes the payload for this one transfer (read-only, under a fresh key)
// and sends one control packet {addr, key, len}; the receiver pulls the
// payload with a read into its own buffer (rrppcc style). A request's read
// completing runs the handler; a response's read completing completes the
// request. The server keeps the response (and its exposure) until the
// slot's next request arrives, which is the acknowledgement; the client
// revokes its request's exposure when the request completes or fails.
//
// Reads in flight are fenced: the buffer a read fills stays the engine's
// until the transport reports the read done (see RpcImpl::BulkRead).
#include <chrono>
#include <cstring>
#include <thread>

#include "common/clock.h"
#include "common/log.h"
#include "rpc/rpc_impl.h"

namespace rpc::detail {

namespace {

uint64_t make_cookie(uint32_t gen, uint32_t index) { return uint64_t{gen} << 32 | index; }

// How long ~Rpc waits for reads still in flight before it makes the
// transport cancel them.
constexpr auto kDrainReadsTimeout = std::chrono::seconds(2);

}  // namespace

// Exposes payload and writes the control packet naming it. False when the
// transport refuses (out of resources): the message goes as datagrams.
bool RpcImpl::expose_payload(const Session& session, MsgBuffer& ctrl, const MsgBuffer& payload,
                             Exposure& exposure) {
  // The data's registration: the application's for a view of its memory,
  // so that exactly the view's bytes are exposed, under its registration.
  const MemRegion* region = MsgBufferAccess::data_region(payload);
  if (!session.route_resolved || region == nullptr ||
      !transport_->expose_for_read(session.remote_route, payload.data(), payload.size(),
                                   region->reg, exposure)) {
    stats_.bulk_expose_failed++;
    return false;
  }
  stats_.bulk_exposures++;
  BulkCtrl{exposure.remote_addr, exposure.key, static_cast<uint32_t>(payload.size()), 0}.store(
      ctrl.data());
  return true;
}

uint32_t RpcImpl::post_bulk_read(Session& session, bool server, uint64_t req_num,
                                 const BulkCtrl& ctrl, MsgBuffer& dst) {
  uint32_t index;
  if (!free_bulk_reads_.empty()) {
    index = free_bulk_reads_.back();
    free_bulk_reads_.pop_back();
  } else {
    // Grows to the most reads ever in flight at once: one per slot plus
    // orphans, which the receive budget bounds.
    index = static_cast<uint32_t>(bulk_reads_.size());
    bulk_reads_.emplace_back();
  }
  BulkRead& r = bulk_reads_[index];
  r.gen++;
  r.live = true;
  r.orphaned = false;
  r.server = server;
  r.sn = session.local_num;
  r.req_num = req_num;
  const BulkOp op{&session.remote_route,
                  dst.data(),
                  MsgBufferAccess::lkey(dst),
                  MsgBufferAccess::data_region(dst)->reg.desc,
                  ctrl.addr,
                  ctrl.key,
                  ctrl.len,
                  make_cookie(r.gen, index)};
  stats_.bulk_reads++;
  if (!transport_->post_read(op)) {
    free_bulk_read(index);
    return kNoBulkRead;
  }
  bulk_reads_live_++;
  return index;
}

void RpcImpl::free_bulk_read(uint32_t index) {
  BulkRead& r = bulk_reads_[index];
  r.live = false;
  r.orphaned = false;
  r.buf = MsgBuffer();
  r.budget_bytes = 0;
  r.cont = nullptr;
  free_bulk_reads_.push_back(index);
}

// The server stops waiting for a request's read (session ended, or the
// client moved on): the read keeps the buffer, and the Rpc's receive
// budget (not the session's or its host's: they may be gone) stays
// charged for it, until the transport reports it done.
void RpcImpl::orphan_server_read(ServerSlot& slot) {
  BulkRead& r = bulk_reads_[slot.bulk_read];
  slot.bulk_read = kNoBulkRead;
  r.orphaned = true;
  stats_.bulk_reads_orphaned++;
  r.buf = slot.req_buf;
  r.budget_bytes = slot.rx_budget_bytes;
  slot.session->rx_budget_bytes -= slot.rx_budget_bytes;
  slot.session->host->budget_bytes -= slot.rx_budget_bytes;
  slot.rx_budget_bytes = 0;
  slot.owns_req_buf = false;
  slot.req_buf = MsgBuffer();
}

// A request failed while its response was being read into the
// application's buffer: the continuation waits for the read to finish, so
// the buffer is never written after the application has it back.
void RpcImpl::orphan_client_read(ClientSlot& slot, ContinuationFn&& cont,
                                 const Completion& completion) {
  BulkRead& r = bulk_reads_[slot.bulk_read];
  slot.bulk_read = kNoBulkRead;
  r.orphaned = true;
  stats_.bulk_reads_orphaned++;
  r.cont = std::move(cont);
  r.completion = completion;
}

void RpcImpl::finish_orphan(uint32_t index) {
  BulkRead& r = bulk_reads_[index];
  if (r.server) {
    MsgBuffer buf = r.buf;
    rx_budget_used_bytes_ -= r.budget_bytes;
    free_bulk_read(index);
    free_msg_buffer(buf);
    return;
  }
  ContinuationFn cont = std::move(r.cont);
  const Completion completion = r.completion;
  free_bulk_read(index);
  if (completion.resp != nullptr) {
    completion.resp->resize(0);
    if (completion.resp->is_app_view()) release_view(*completion.resp);
  }
  run_continuation(cont, completion);
}

void RpcImpl::server_start_bulk_read(Session& session, ServerSlot& slot, uint32_t msg_size,
                                     const uint8_t* ctrl_data) {
  const BulkCtrl c = BulkCtrl::load(ctrl_data);
  // The length to read is the peer's word: it must be the size the header
  // announced and within what this Rpc receives at all.
  if (c.len != msg_size || c.len > max_msg_size_ || c.reserved != 0) {
    stats_.drops.bad_header++;
    slot.has_req = false;
    return;
  }
  if (!alloc_req_buf(session, slot, c.len)) {  // over budget or out of memory: the client retries
    slot.has_req = false;
    return;
  }
  set_slot_state(slot, ServerSlotState::kBulkReading);
  slot.bulk_read = post_bulk_read(session, true, slot.req_num, c, slot.req_buf);
  if (slot.bulk_read == kNoBulkRead) {
    release_server_slot(slot);  // the client's RTO resends the control packet
    slot.has_req = false;
    set_slot_state(slot, ServerSlotState::kIdle);
  }
}

void RpcImpl::client_start_bulk_read(Session& session, ClientSlot& slot, const uint8_t* ctrl_data) {
  const BulkCtrl c = BulkCtrl::load(ctrl_data);
  // The header's size was checked against the response buffer; the control
  // packet must agree with it.
  if (c.len != slot.resp->size() || c.reserved != 0) {
    client_complete(slot, Errc::kRespBufferTooSmall, 0);
    return;
  }
  slot.bulk_read = post_bulk_read(session, false, slot.req_num, c, *slot.resp);
  if (slot.bulk_read == kNoBulkRead) bulk_resp_read_failed(slot);
}

// The response's read failed: forget that its control packet arrived and
// send the request's last packet again, which the server answers from its
// cache with the control packet. The packet counts move together, so the
// session's credits stay as they are (taking one back could wrap them at 0).
void RpcImpl::bulk_resp_read_failed(ClientSlot& slot) {
  slot.bulk_read = kNoBulkRead;
  slot.num_rx--;
  slot.num_tx--;
  slot.resp_pkts = 0;
  client_try_send(slot);
}

void RpcImpl::poll_bulk() {
  std::array<BulkCompletion, 16> done;
  const size_t n = transport_->poll_bulk(done);
  for (size_t i = 0; i < n; i++) {
    const auto index = static_cast<uint32_t>(done[i].cookie);
    const auto gen = static_cast<uint32_t>(done[i].cookie >> 32);
    if (index >= bulk_reads_.size() || !bulk_reads_[index].live || bulk_reads_[index].gen != gen) {
      RPC_LOG_WARN("Rpc {}: a one-sided read completed twice or was never posted", config_.rpc_id);
      continue;
    }
    bulk_reads_live_--;
    if (!done[i].ok) stats_.bulk_reads_failed++;
    BulkRead& r = bulk_reads_[index];
    if (r.orphaned) {
      finish_orphan(index);
      continue;
    }
    // Not orphaned: the slot that posted it still waits for it (every way
    // out of the reading states orphans the read first).
    Session& session = *sessions_[r.sn];
    const uint64_t req_num = r.req_num;
    const bool server = r.server;
    free_bulk_read(index);
    if (server) {
      ServerSlot& slot = session.sslots[req_num % kSessionReqWindow];
      RPC_ASSERT(slot.bulk_read == index && slot.state == ServerSlotState::kBulkReading,
                 "a live request read belongs to its slot");
      slot.bulk_read = kNoBulkRead;
      if (!done[i].ok) {
        release_server_slot(slot);
        slot.has_req = false;
        set_slot_state(slot, ServerSlotState::kIdle);
        continue;
      }
      slot.req_rx = 1;
      invoke_handler_on_req_buf(session, slot, slot.handle.req_type());
      continue;
    }
    ClientSlot& slot = session.cslots[req_num % kSessionReqWindow];
    RPC_ASSERT(slot.active && slot.bulk_read == index, "a live response read belongs to its slot");
    if (slot.pending_end != Errc::kOk) [[unlikely]] {  // given up while the read ran
      slot.bulk_read = kNoBulkRead;
      client_complete(slot, slot.pending_end, 0);
      continue;
    }
    if (!done[i].ok) {
      bulk_resp_read_failed(slot);
      continue;
    }
    slot.bulk_read = kNoBulkRead;
    client_complete(slot, Errc::kOk, slot.resp->size());
  }
  // Connections that failed (their reads were reported above): every
  // session over them is ended, with the reason.
  std::array<uint64_t, 4> failed;
  const size_t num_failed = transport_->poll_failed_bulk_paths(failed);
  for (size_t i = 0; i < num_failed; i++) reset_failed_bulk_path(failed[i]);
}

// Client sessions over the path are reset (the server is asked to free its
// end; kSessionReset to every outstanding request, the transport's reason,
// e.g. SmErr::kBulkPathFailed, to the session callback); server sessions
// are ended, as for a dead client. A new connect builds a new connection.
void RpcImpl::reset_failed_bulk_path(uint64_t path) {
  // ~Rpc ends every session itself, once its reads are drained: none may
  // be freed while the continuations those reads held back still run.
  if (destroying_) return;
  const SmErr reason = transport_->bulk_path_failure_reason(path);
  // A samehost channel also "fails" when the peer closes it after an
  // orderly disconnect: only a failure that ends sessions is one to report.
  size_t ended = 0;
  // By index: continuations may create sessions while this runs.
  for (size_t sn = 0; sn < sessions_.size(); sn++) {
    Session* s = sessions_[sn].get();
    if (s == nullptr || !s->route_resolved || transport_->bulk_path_of(s->remote_route) != path) {
      continue;
    }
    if (!s->is_client()) {
      if (s->state == SessionState::kDraining) continue;
      stats_.sessions_reset++;
      ended++;
      end_server_session(*s, SessionEvent::kReset, reason);
    } else if (s->state == SessionState::kConnected) {
      ended++;
      reset_client_session(*s, Errc::kSessionReset, reason, /*send_disc=*/true);
    }
  }
  if (ended == 0) return;
  stats_.bulk_paths_failed++;
  RPC_LOG_WARN("Rpc {}: a connection to a peer failed ({}); reset {} session(s) over it",
               config_.rpc_id, to_string(reason), ended);
}

// ~Rpc: every read still in flight must be over before its buffer goes
// back to the application or the allocator. Waits for them, and after
// kDrainReadsTimeout (a peer that never answers) makes the transport
// cancel the rest. REQUIRES: every read is orphaned, and no session has
// been freed yet (the continuations run here may resume coroutine
// handlers, which name their handles).
void RpcImpl::drain_bulk_reads() {
  // A read still owned by its slot would run its handler or complete its
  // request below.
  for (const BulkRead& r : bulk_reads_) {
    RPC_ASSERT(!r.live || r.orphaned, "~Rpc orphans every read before draining");
  }
  const auto deadline = std::chrono::steady_clock::now() + kDrainReadsTimeout;
  while (bulk_reads_live_ > 0 && std::chrono::steady_clock::now() < deadline) {
    poll_bulk();
    std::array<RxPacket, kRxBatch> rx;            // keep the datagram path moving for providers
    const size_t got = transport_->rx_burst(rx);  // that progress on it
    if (got > 0) transport_->post_recvs(got);
    if (bulk_reads_live_ > 0) std::this_thread::yield();
  }
  if (bulk_reads_live_ == 0) return;
  RPC_LOG_WARN("Rpc {}: {} one-sided reads did not finish in time; cancelling them", config_.rpc_id,
               bulk_reads_live_);
  transport_->quiesce_bulk();
  for (uint32_t i = 0; i < bulk_reads_.size(); i++) {
    if (!bulk_reads_[i].live) continue;
    bulk_reads_live_--;
    stats_.bulk_reads_failed++;
    finish_orphan(i);
  }
}

}  // namespace rpc::detail
