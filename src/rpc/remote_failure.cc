// A remote Nexus declared failed (heartbeats stopped, or it restarted): the
// sessions with it are reset, and its requests held until it is gone.

#include "nexus/nexus_impl.h"
#include "rpc/rpc_impl.h"

namespace rpc::detail {

void RpcImpl::hold_remote(Session& session, const NetAddr& remote, uint64_t incarnation) {
  session.remote_nexus = remote;
  session.remote_incarnation = incarnation;
  session.holds_remote_ref = true;
  nexus_.add_remote(remote, incarnation);
}

// The remote process died or restarted: every session bound to that
// incarnation is reset. Outstanding requests fail with kSessionReset and
// server-side state of a dead client is freed. Sessions still connecting
// are left to their own connect timeout.
void RpcImpl::handle_remote_failure(const NetAddr& remote, uint64_t incarnation) {
  if (incarnation == 0) return;
  // By index: continuations and callbacks may create sessions (and grow
  // sessions_) while this runs.
  for (size_t sn = 0; sn < sessions_.size(); sn++) {
    Session* s = sessions_[sn].get();
    if (s == nullptr || !(s->remote_nexus == remote) || s->remote_incarnation != incarnation) {
      continue;
    }
    if (!s->is_client()) {
      if (s->state == SessionState::kDraining) continue;
      stats_.sessions_reset++;
      end_server_session(*s, SessionEvent::kReset, SmErr::kRemoteFailed);
      continue;
    }
    if (s->state == SessionState::kConnected) {
      // The server may be alive after all (a link that came back just as
      // the timeout expired): ask it to free its end, or it would keep it
      // until this process dies. Harmless when it is really gone.
      reset_client_session(*s, Errc::kSessionReset, SmErr::kRemoteFailed, /*send_disc=*/true);
    } else if (s->state == SessionState::kDisconnecting) {
      const auto num = static_cast<SessionNum>(sn);
      free_session(*s);  // its disconnect request would only time out
      notify(num, SessionEvent::kDisconnected, SmErr::kRemoteFailed);
    }
  }
}

}  // namespace rpc::detail
