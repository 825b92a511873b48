// Requests that end before their answer: Rpc::cancel() and per-request
// deadlines (RequestOptions::timeout). Unlike request_timeout_ms, the
// session stays up: the slot moves on to its next request number, which
// tells the server the client gave the old one up (server_new_req), so
// the server's answer to it is dropped as stale and the server abandons a
// request it had in part.
#include <vector>

#include "rpc/rpc_impl.h"

namespace rpc::detail {

bool RpcImpl::cancel(RequestId id) noexcept {
  RPC_CHECK_OWNER("cancel");
  const auto sn = static_cast<SessionNum>(id.value >> 48);
  Session* s = sn < sessions_.size() ? sessions_[sn].get() : nullptr;
  if (destroying_ || id.value == 0 || s == nullptr || !s->is_client()) return false;
  for (ClientSlot& slot : s->cslots) {
    if (slot.active && slot.request_id == id.value && slot.pending_end == Errc::kOk) {
      stats_.requests_cancelled++;
      end_request_early(slot, Errc::kCancelled);
      return true;
    }
  }
  std::vector<BacklogEntry> taken;
  s->backlog.take_if([&](const BacklogEntry& e) { return e.request_id == id.value; }, taken);
  if (taken.empty()) return false;
  stats_.requests_cancelled++;
  fail_backlog_entries(*s, taken, Errc::kCancelled);
  return true;
}

void RpcImpl::end_request_early(ClientSlot& slot, Errc errc) {
  // A transfer that may still touch the request's buffers, or the
  // server's, keeps the slot (so the slot's next request cannot make the
  // server withdraw what is being read) and the request ends when it is
  // over (pending_end, applied in resp.cc and bulk.cc):
  // - a request whose control packet went out may be being read one-sided
  //   by the server; withdrawing it (revoke_exposure) would fail that
  //   read, and on verbs RC and ofi_rxm over verbs a failed read breaks the
  //   connection and every session over it (seen in the Soft-RoCE VM). By
  //   the server's answer (num_rx > 0) its read is over.
  // - a response being read into resp reads the server's exposure, which
  //   the server revokes when the slot's next request arrives.
  const bool request_may_be_read =
      slot.bulk_req && slot.tx_high > 0 && slot.num_rx == 0 && slot.req_exposure.active();
  if (request_may_be_read || slot.bulk_read != kNoBulkRead) {
    slot.pending_end = errc;
    stats_.requests_end_deferred++;
    return;
  }
  Session& session = *slot.session;
  bool reset_session = false;
  if (slot.tx_high == 0) {
    slot.next_req_num = slot.req_num;  // never on the wire: the next request reuses its number
  } else {
    // No response heard: the server may be running its handler, so new
    // requests go to other slots while they can (lowest_free_client_slot).
    if (slot.num_rx < slot.req_pkts) {
      session.unheard_cslots |= slot_bit(slot.req_num);
    }
    // Nothing heard at all: the server may not have the request, a gap in
    // the slot's numbers. It takes at most kMaxReqsGivenUp numbers ahead:
    // one more and the slot would be stuck, each new request given up in
    // its turn.
    if (slot.num_rx == 0 && ++slot.given_up_unheard >= kMaxReqsGivenUp) reset_session = true;
  }
  // Packets of the request may wait in the TX batch, pointing into the
  // buffer the continuation hands back.
  tx_flush();
  client_complete(slot, errc, 0);
  if (reset_session && session.is_connected()) {
    stats_.requests_timed_out++;
    reset_client_session(session, Errc::kSessionReset, SmErr::kRequestTimeout, /*send_disc=*/true);
  }
}

// Entries already taken out of the backlog (they never reached a slot, so
// no packet of theirs was sent).
void RpcImpl::fail_backlog_entries(Session& session, std::vector<BacklogEntry>& entries,
                                   Errc errc) {
  for (BacklogEntry& e : entries) {
    if (e.deadline_ns != 0) session.backlog_deadlines--;
    e.resp->resize(0);
    release_views(*e.req, *e.resp);
    session.stats.requests_completed++;
    stats_.requests_completed++;
    run_continuation(e.cont, Completion{errc, e.resp, 0, e.tag});
  }
}

// Fails the backlog's requests whose deadline has passed (those in slots
// are checked by the loss scan, scan_client_session).
void RpcImpl::expire_backlog_deadlines(Session& session) {
  std::vector<BacklogEntry> expired;
  session.backlog.take_if(
      [&](const BacklogEntry& e) { return e.deadline_ns != 0 && now_ns_ >= e.deadline_ns; },
      expired);
  stats_.requests_past_deadline += expired.size();
  fail_backlog_entries(session, expired, Errc::kTimedOut);
}

}  // namespace rpc::detail
