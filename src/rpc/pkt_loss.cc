// Loss recovery: a client slot that made no progress for an RTO rolls back
// to its last acknowledged packet and resends from there (go-back-N). The
// RTO is the session's, from measured round trips (rtt.h), doubled for
// each timeout of the slot in a row (nothing answered in between). The
// server answers duplicates from its cache, so handlers run at most once.
// The same scan bounds waiting: a request that hears nothing for
// request_timeout_ms fails and resets its session, and a server drops a
// request received in part whose client went silent.
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

void RpcImpl::scan_server_session(Session& session) {
  for (ServerSlot& slot : session.sslots) {
    if (slot.state != ServerSlotState::kReceiving) continue;
    // Silent too long, or trickling slower than kMinRxBytesPerSec overall.
    if (now_ns_ - slot.rx_progress_ns >= partial_request_timeout_ns_ ||
        now_ns_ >= slot.rx_deadline_ns) {
      abandon_partial_request(slot);
    }
  }
}

void RpcImpl::rollback(ClientSlot& slot) {
  Session& session = *slot.session;
  session.credits += slot.num_tx - slot.num_rx;
  // A request acknowledged in part that has heard nothing for as long as a
  // server waits before it drops a request received in part (our own
  // partial_request_timeout_ms; the server may have dropped it for that or
  // for trickling: abandon_partial_request) starts over from its first
  // packet, the only one such a server takes for it. Resent from the
  // middle, it was dropped until request_timeout_ms failed it (seen with
  // congestion control on a jittery link: netns "delay-2ms-jitter-1ms").
  // A server that still has it answers the early packets again. At most
  // once per such wait; the answers accepted again are not progress
  // (rx_high), so request_timeout_ms still bounds the request.
  if (slot.num_rx > 0 && slot.num_rx < slot.req_pkts &&
      now_ns_ - slot.rx_progress_ns >= partial_request_timeout_ns_ &&
      now_ns_ - slot.restart_ns >= partial_request_timeout_ns_) {
    slot.num_rx = 0;
    slot.restart_ns = now_ns_;
    stats_.requests_restarted++;
  }
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
    session.timely.on_loss(now_ns_, session.rtt.rto_ns());
    // A timeout is feedback too (a session whose every answer comes after
    // its RTO, as from a handler slower than it, takes no RTT sample at
    // all: Karn's rule).
    end_initial_window(session);
  }
  client_try_send(slot);
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

}  // namespace rpc::detail
