// Loss recovery: a client slot that made no progress for an RTO rolls back
// to its last acknowledged packet and resends from there (go-back-N). The
// RTO is the session's, from measured round trips (rtt.h), doubled for
// each timeout of the slot in a row (nothing answered in between). The
// server answers duplicates from its cache, so handlers run at most once.
// The same scan bounds waiting: a request that hears nothing for
// request_timeout_ms fails and resets its session. A server keeps what it
// received of a request for as long as the session lives, and drops a
// stale one only to make room for others, telling its client; likewise a
// cached response sent long ago (docs/reliability.md, "Budgets").
#include <algorithm>

#include "rpc/rpc_impl.h"

namespace rpc::detail {

void RpcImpl::scan_for_loss() {
  last_loss_scan_ns_ = now_ns_;
  // By index: a timed-out request's continuation may create sessions.
  for (size_t sn = 0; sn < sessions_.size(); sn++) {
    Session* s = sessions_[sn].get();
    if (s == nullptr) continue;
    if (s->state == SessionState::kConnecting && s->backlog_deadlines != 0) {
      expire_backlog_deadlines(*s);  // requests queued on a session still connecting
    }
    if (!s->is_connected()) continue;
    if (s->is_client()) {
      scan_client_session(*s);
    } else {
      scan_server_session(*s);
    }
  }
}

// Returns false when the session was reset (and freed).
bool RpcImpl::scan_client_session(Session& session) {
  for (ClientSlot& slot : session.cslots) {
    if (!slot.active) continue;
    if (slot.deadline_ns != 0 && now_ns_ >= slot.deadline_ns && slot.pending_end == Errc::kOk)
        [[unlikely]] {
      stats_.requests_past_deadline++;
      end_request_early(slot, Errc::kTimedOut);  // the next request may take the slot now
      if (!session.is_connected()) return true;  // its continuation destroyed the session
      continue;
    }
    if (request_timeout_ns_ != 0 && now_ns_ - slot.rx_progress_ns >= request_timeout_ns_) {
      time_out_request(slot);
      return false;
    }
    // Nothing in flight (waiting for credits or a bulk read) is not loss.
    if (slot.bulk_read != kNoBulkRead || slot.num_tx == slot.num_rx) continue;
    if (now_ns_ - slot.progress_ns >= session.rtt.backed_off_rto_ns(slot.rto_backoff)) {
      rollback(slot);
    }
  }
  if (session.backlog_deadlines != 0) expire_backlog_deadlines(session);
  return true;
}

// What a server session holds of the receive budget, given back when a
// budget it counts against (its own, its host's, the Rpc's) refused a
// request while the holding was stale.
//
// Requests received in part (docs/reliability.md). Dropping one for time
// alone threw progress away under heavy loss: eight 128 KB requests at 30 %
// loss each went silent for a second now and then, were dropped, started
// over from packet 0, and never completed. So what arrived is kept, and a
// request is dropped only when a budget it holds refused another request
// while it was stale: silent for partial_request_timeout_ms, or behind
// kMinRxBytesPerSec since its first packet, counting what has arrived
// (a trickle that squats on the budget: judged by the whole message's
// size instead, a 16 MiB request could trickle for 17 minutes). Its
// client is told (abandon_partial_request) and starts it over; one that is
// only slow loses its progress, but only to a request that needed the
// room.
//
// Cached responses: one whose client has not asked for any of it (by the
// request again, or an RFR) for partial_request_timeout_ms is dropped
// (drop_settled_response). An honest client has it, or asks again within
// its RTO (at most a second unless rto_us is higher), so this takes from
// clients that leave responses in our memory. Without it, a client that has
// its answer but sends no further request on that slot would hold the
// budget, and the refused request would wait for as long as it likes.
void RpcImpl::scan_server_session(Session& session) {
  const uint64_t refused_ns =
      std::max({rx_budget_refused_ns_, session.rx_budget_refused_ns, session.host->refused_ns});
  if (refused_ns == 0) return;
  const size_t dpp = caps_.max_data_per_pkt;
  for (ServerSlot& slot : session.sslots) {
    if (slot.state == ServerSlotState::kResponded) {
      if (slot.resp_budget_bytes != 0 &&
          refused_ns >= slot.resp_sent_ns + partial_request_timeout_ns_)
        drop_settled_response(slot);
      continue;
    }
    if (slot.state != ServerSlotState::kReceiving) continue;
    const uint64_t behind_since_ns =
        slot.rx_start_ns + partial_request_timeout_ns_ +
        uint64_t{slot.req_rx * dpp} * 1'000'000'000 / kMinRxBytesPerSec;
    const uint64_t stale_since_ns =
        std::min(slot.rx_progress_ns + partial_request_timeout_ns_, behind_since_ns);
    if (refused_ns >= stale_since_ns) abandon_partial_request(session, slot);
  }
}

// The slot's response goes, its request number stays: the handler never
// runs again for it, and a client that asks for it again is told
// (server_send_resp_pkt), and fails the request with kResponseDropped.
void RpcImpl::drop_settled_response(ServerSlot& slot) {
  stats_.responses_dropped++;
  if (slot.resp_exposure.active()) transport_->revoke_exposure(slot.resp_exposure);
  free_dyn_resp(slot);
  slot.resp = nullptr;
  slot.resp_bulk = false;
  slot.status = static_cast<uint8_t>(RespStatus::kResponseDropped);
}

void RpcImpl::rollback(ClientSlot& slot) {
  Session& session = *slot.session;
  // Resent from the last acknowledged packet, never from the start on a
  // guess: a server keeps what it has, and says so when it dropped it
  // (client_restart_request).
  session.credits += slot.num_tx - slot.num_rx;
  slot.rolled_back_tx = std::max(slot.rolled_back_tx, slot.num_tx);
  slot.num_tx = slot.num_rx;
  slot.progress_ns = now_ns_;
  slot.rtt_sample_index = kNoSample;  // Karn: an answer now may be to either copy
  if (slot.rto_backoff < kMaxRtoBackoff) slot.rto_backoff++;
  session.stats.retransmissions++;
  stats_.retransmissions++;
  if (wheel_ != nullptr) {  // congestion control
    // A timeout halves the rate, once per RTO however many slots time
    // out (one loss event, one cut). Also the first one of a slot, though
    // a handler slower than the RTO times out with nothing lost: waiting
    // for a second (tried) let an 8-client incast's probes wait 2.5 times
    // longer at the bottleneck and retransmit 3 times more.
    if (session.timely.on_loss(now_ns_, session.rtt.rto_ns())) {  // a new loss event
      stats_.cc_timeout_cuts++;
      session.cut_slots_unproven = 0;
      session.cut_undo_blocked = false;
    }
    // The slot waits for proof that this timeout was spurious, unless it
    // already timed out in this loss event.
    const uint64_t cut = session.timely.cuts();
    if (slot.undo_cut == cut) {
      session.cut_undo_blocked = true;
    } else {
      slot.undo_cut = cut;
      slot.undo_req_num = slot.req_num;
      slot.undo_rx_index = slot.num_rx;
      slot.undo_req_pkts = slot.req_pkts;
      session.cut_slots_unproven++;
    }
    // A timeout is feedback too (a session whose every answer comes after
    // its RTO, as from a handler slower than it, takes no RTT sample at
    // all: Karn's rule).
    end_initial_window(session);
  }
  client_try_send(slot);
}

// A second answer to packet rx_index of request req_num, which a timeout
// of this slot resent from undo_rx_index on: the server had the first copy
// (it answers a packet it already took again, and takes packets only in
// order), so nothing was lost and the timeout was spurious: a descheduled
// peer, or an answer that waited behind others. Once every slot of the
// cut's loss event is proven so, the cut is undone (Timely::undo_loss).
// A network that duplicates packets can prove a real loss spurious; the
// rate is then back where it was, and the next timeout cuts it again.
void RpcImpl::check_spurious_timeout(ClientSlot& slot, uint64_t req_num, size_t rx_index) {
  Session& session = *slot.session;
  if (req_num != slot.undo_req_num || rx_index < slot.undo_rx_index) return;
  const bool current = slot.undo_cut == session.timely.cuts();
  slot.undo_cut = 0;
  if (!current || session.cut_undo_blocked || session.cut_slots_unproven == 0) return;
  if (--session.cut_slots_unproven == 0 && session.timely.undo_loss()) {
    stats_.cc_timeout_cuts_undone++;
  }
}

// An answer for a request the slot no longer holds (client_slot_for
// refused it): most often the second answer to a request whose timeout
// resent it, arriving after the first completed it.
void RpcImpl::check_stale_answer(Session& session, const PktHdr& hdr) {
  const size_t slot_index = hdr.req_num() % kSessionReqWindow;
  if (!session.cslots.has(slot_index)) return;
  ClientSlot& slot = session.cslots[slot_index];
  // The answer to the slot's last request, given up: the server's handler
  // has responded, so the slot's next request will not wait for it, and
  // the server holds that request's number (no gap).
  if (hdr.pkt_type() == PktType::kResp && !slot.active && hdr.req_num() == slot.req_num) {
    session.unheard_cslots &= ~slot_bit(hdr.req_num());
    slot.given_up_unheard = 0;
  }
  if (slot.undo_cut == 0 || hdr.restart()) return;  // (a restart notice answers nothing)
  // Answers are indexed as client_accept counts them: a credit return k
  // answers request packet k, response packet k the request's last packet
  // and then RFR k.
  const size_t rx_index =
      hdr.pkt_type() == PktType::kResp ? slot.undo_req_pkts - 1 + hdr.pkt_num() : hdr.pkt_num();
  check_spurious_timeout(slot, hdr.req_num(), rx_index);
}

// Nothing came back for this request for request_timeout_ms: the server,
// its Rpc or the path to it is gone, or its handler never responds. The
// slot cannot be reused while the server may still hold the request, so
// the whole session is reset (its server end asked to go away).
void RpcImpl::time_out_request(ClientSlot& slot) {
  stats_.requests_timed_out++;
  reset_client_session(*slot.session, Errc::kSessionReset, SmErr::kRequestTimeout,
                       /*send_disc=*/true, &slot);
}

// The server dropped the part it held of this request to make room for
// others (abandon_partial_request) and expects it again from packet 0.
// Ignored when nothing acknowledged would be thrown away: with no packet
// acknowledged, the go-back-N resend starts from packet 0 anyway (and so
// the notices the server repeats for the other packets of one round do not
// restart it again and again); once a response packet is in, the server
// had the whole request, and the notice is stale or forged. The
// answers accepted again are not progress (rx_high), so request_timeout_ms
// still bounds a request that keeps being dropped.
void RpcImpl::client_restart_request(ClientSlot& slot) {
  if (slot.num_rx == 0 || slot.num_rx >= slot.req_pkts || slot.bulk_req) {
    stats_.drops.stale++;
    return;
  }
  Session& session = *slot.session;
  session.credits += slot.num_tx - slot.num_rx;
  slot.num_rx = 0;
  slot.num_tx = 0;
  slot.rolled_back_tx = 0;  // the server dropped what it had: earlier answers are void
  slot.progress_ns = now_ns_;
  slot.rtt_sample_index = kNoSample;  // Karn: an answer now may be to either copy
  stats_.requests_restarted++;
  client_try_send(slot);
}

}  // namespace rpc::detail
