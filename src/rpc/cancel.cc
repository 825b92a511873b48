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
  // A request whose control packet went out may be being read one-sided
  // by the server. Withdrawing it (revoke_exposure) would fail that read,
  // and on verbs RC and ofi_rxm over verbs a failed read breaks the
  // connection, and every session over it (seen in the Soft-RoCE VM). So
  // it ends when the server answers: by then the read is over.
  // (Once the server has answered, num_rx > 0, it has read it.)
  if (slot.bulk_req && slot.tx_high > 0 && slot.num_rx == 0 && slot.req_exposure.active()) {
    slot.pending_end = errc;
    stats_.requests_end_deferred++;
    return;
  }
  // Packets of the request may wait in the TX batch, pointing into the
  // buffer the continuation hands back. A response being read into resp
  // holds the continuation back until the read is done (client_complete).
  tx_flush();
  client_complete(slot, errc, 0);
}

// Entries already taken out of the backlog (they never reached a slot, so
// no packet of theirs was sent).
void RpcImpl::fail_backlog_entries(Session& session, std::vector<BacklogEntry>& entries,
                                   Errc errc) {
  for (BacklogEntry& e : entries) {
    if (e.deadline_ns != 0) session.backlog_deadlines--;
    e.resp->resize(0);
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
