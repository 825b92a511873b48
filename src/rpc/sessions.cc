// Session lifecycle on the Rpc thread: allocation, the state machine (every
// transition goes through set_state), ending sessions, failing their
// requests, and the tombstones of ended server sessions.
#include <fmt/format.h>

#include "common/log.h"
#include "nexus/nexus_impl.h"
#include "rpc/rpc_impl.h"

namespace rpc::detail {

const char* to_string(SessionState state) {
  switch (state) {
    case SessionState::kConnecting:
      return "connecting";
    case SessionState::kConnectingDoomed:
      return "connecting (destroyed)";
    case SessionState::kConnected:
      return "connected";
    case SessionState::kDisconnecting:
      return "disconnecting";
    case SessionState::kDraining:
      return "draining";
  }
  return "unknown";
}

void RpcImpl::set_state(Session& session, SessionState to) {
  if (!session_transition_ok(session.state, to)) [[unlikely]] {
    const std::string what =
        fmt::format("Rpc {}: session {} cannot go from {} to {}", config_.rpc_id, session.local_num,
                    to_string(session.state), to_string(to));
    assert_failed("session_transition_ok(from, to)", what.c_str(), __FILE__, __LINE__);
  }
  session.state = to;
}

// A client session gets its slots (and their bulk control buffers) now; a
// server session nothing until its first request (alloc_server_slots), so
// that idle server sessions are cheap.
Session* RpcImpl::alloc_session(SessionRole role, size_t wanted_credits) {
  if (num_sessions_ >= config_.max_sessions) return nullptr;
  auto s = std::make_unique<Session>();
  s->role = role;
  s->rtt = RttEstimator(session_rto_floor_ns_);
  if (wheel_ != nullptr) s->timely = Timely(timely_params_, now_ns_);
  s->state = role == SessionRole::kClient ? SessionState::kConnecting : SessionState::kConnected;
  const bool ok = role != SessionRole::kClient || add_client_slots(*s);
  SessionNum sn;
  if (free_session_nums_.empty()) {
    sn = static_cast<SessionNum>(sessions_.size());
    sessions_.emplace_back();
  } else {
    sn = free_session_nums_.back();
    free_session_nums_.pop_back();
  }
  s->local_num = sn;
  // Admitted last, once nothing can throw: the ring counters hold only
  // sessions that exist.
  set_session_credits(*s, admit(wanted_credits));
  sessions_[sn] = std::move(s);
  num_sessions_++;
  if (!ok) {
    free_session(*sessions_[sn]);
    return nullptr;
  }
  return sessions_[sn].get();
}

// The next eight slots of a client session (the first eight when it is
// created, more when a request finds them all busy), with their bulk
// control buffers. False, and no slots added, when there is no room for
// more or a buffer could not be had.
bool RpcImpl::add_client_slots(Session& session) {
  const size_t first_index = session.cslots.first_missing();
  if (first_index == kSessionReqWindow) return false;
  const uint64_t first = first_req_num(session.sm_token);
  bool ok = true;
  session.cslots.allocate_chunk_of(first_index, [&](ClientSlot& c, size_t index) {
    c.session = &session;
    c.next_req_num = (first + index) & kReqNumMask;
    if (caps_.bulk) {
      c.bulk_ctrl = alloc_msg_buffer(kBulkCtrlBytes);
      ok = ok && c.bulk_ctrl.valid();
    }
  });
  if (!ok) {
    for (size_t i = first_index; i < first_index + SlotBlock<ClientSlot>::kChunkSlots; i++) {
      free_msg_buffer(session.cslots[i].bulk_ctrl);
    }
    session.cslots.free_chunk_of(first_index);
  }
  return ok;
}

// Starts requests queued while the session connected: into its free
// slots, then into new ones eight at a time up to kSessionReqWindow, so a
// backlog taken at connect time gets the window a request enqueued later
// would (without this, it stayed at the first eight).
void RpcImpl::start_backlog(Session& session) {
  while (!session.backlog.empty()) {
    ClientSlot* slot = lowest_free_client_slot(session);
    if (slot == nullptr) break;
    start_request(*slot, take_backlog_front(session));
  }
}

// lowest_free_client_slot when every slot made is busy or given up
// unheard: the first of eight more, while the session has fewer than 32;
// else a free one given up unheard (its request waits at the server until
// the old handler answers), taken in turn: a request that never reached
// the server leaves a mark that only an answer in its slot clears, so
// every such slot must be tried again; nullptr when none is free.
ClientSlot* RpcImpl::free_client_slot_beyond_heard(Session& session) {
  const size_t made = session.cslots.size();
  if (made < kSessionReqWindow && add_client_slots(session)) return &session.cslots[made];
  for (size_t i = 0; i < made; i++) {
    const size_t index = (session.unheard_turn + i) % made;
    if ((session.busy_cslots >> index & 1) == 0) {
      session.unheard_turn = static_cast<uint8_t>((index + 1) % made);
      return &session.cslots[index];
    }
  }
  return nullptr;
}

// The eight server slots that hold slot `index`, when its first request
// arrives.
void RpcImpl::alloc_server_slots(Session& session, size_t index) {
  const uint64_t first = first_req_num(session.sm_token);
  session.sslots.allocate_chunk_of(index, [&](ServerSlot& v, size_t i) {
    v.session = &session;
    v.req_num = (first + i) & kReqNumMask;  // the first request number the slot expects
    ReqHandleAccess::init(v.handle, &owner_, config_.context, &v);
  });
}

bool RpcImpl::ensure_slot_buffers(ServerSlot& slot) {
  MsgBuffer& pre_resp = ReqHandleAccess::pre_resp(slot.handle);
  if (!pre_resp.valid()) pre_resp = alloc_msg_buffer(caps_.max_data_per_pkt);
  if (caps_.bulk && !slot.bulk_ctrl.valid()) slot.bulk_ctrl = alloc_msg_buffer(kBulkCtrlBytes);
  return pre_resp.valid() && (!caps_.bulk || slot.bulk_ctrl.valid());
}

void RpcImpl::free_session(Session& session) {
  // Packets queued for this session point at its route and its buffers.
  tx_flush();
  for (ServerSlot& slot : session.sslots) {
    release_server_slot(slot);
    free_msg_buffer(ReqHandleAccess::pre_resp(slot.handle));
    free_msg_buffer(slot.bulk_ctrl);
  }
  for (ClientSlot& slot : session.cslots) {
    free_msg_buffer(slot.bulk_ctrl);
    if (slot.in_stall_queue) std::erase(stall_queue_, &slot);
  }
  if (session.role == SessionRole::kServer) {
    server_sessions_by_token_.erase(session.sm_token);
    add_tombstone(session.sm_token);
  }
  if (session.host != nullptr) {
    RemoteHost& host = *session.host;
    session.host = nullptr;
    if (--host.server_sessions == 0) {
      // Its slots gave back what they held (release_server_slot above).
      RPC_ASSERT(host.budget_bytes == 0, "a remote host with no session holds budget");
      hosts_.erase(host.ipv4);
    }
  }
  if (session.holds_remote_ref) nexus_.release_remote(session.remote_nexus);
  if (session.route_resolved) transport_->release_remote_routing_info(session.remote_route);
  if (session.offer_pending) transport_->cancel_connect(session.local_offer);
  const SessionNum sn = session.local_num;
  set_session_credits(session, Admission{0, 0});
  sessions_[sn].reset();
  free_session_nums_.push_back(sn);
  num_sessions_--;
  stats_.sessions_freed++;
}

// A connect request replayed (or retransmitted very late) after its session
// ended must not build the session again: the client is gone or moved on,
// and nobody would ever end the new one. Bounded: the oldest are forgotten.
void RpcImpl::add_tombstone(uint64_t token) {
  if (!tombstones_.insert(token).second) return;
  tombstone_fifo_.push_back(token);
  if (tombstone_fifo_.size() > kMaxTombstones) {
    tombstones_.erase(tombstone_fifo_.front());
    tombstone_fifo_.pop_front();
  }
}

// No events from ~Rpc: the application is tearing the Rpc down.
namespace {

// Runs an application's session callback: an exception from it is caught,
// logged and counted, and the Rpc carries on.
template <typename Fn, typename... Args>
void run_session_callback(const Fn& fn, RpcStats& stats, RpcId rpc_id, SessionNum sn,
                          Args&&... args) noexcept {
  try {
    fn(std::forward<Args>(args)...);
  } catch (const std::exception& e) {
    stats.callback_exceptions++;
    RPC_LOG_ERROR("Rpc {}: a session callback threw for session {}: {}", rpc_id, sn, e.what());
  } catch (...) {
    stats.callback_exceptions++;
    RPC_LOG_ERROR("Rpc {}: a session callback threw for session {}", rpc_id, sn);
  }
}

}  // namespace

void RpcImpl::notify(SessionNum sn, SessionEvent event, SmErr err) {
  if (event == SessionEvent::kConnectFailed) {
    connect_failures_++;
    last_connect_failure_ = {sn, err};
  }
  if (!config_.session_callback || destroying_) return;
  callbacks_running_++;
  run_session_callback(config_.session_callback, stats_, config_.rpc_id, sn, sn, event, err);
  callbacks_running_--;
}

void RpcImpl::notify_server(const Session& session, SessionEvent event, SmErr err) {
  if (!config_.server_session_callback || destroying_) return;
  callbacks_running_++;
  run_session_callback(config_.server_session_callback, stats_, config_.rpc_id, session.local_num,
                       ServerSessionEvent{session.local_num, event, err, session.remote_rpc_id,
                                          session.remote_nexus.to_string()});
  callbacks_running_--;
}

// The one place continuations run. The request's state is final before
// this is called, so whatever the continuation does (enqueue, destroy the
// session, throw) cannot make it run again.
void RpcImpl::run_continuation(ContinuationFn& cont, const Completion& completion) noexcept {
  // Counted, so that the loop, call_sync and connect refuse to run from a
  // continuation also where cancel() or destroy_session() runs it, outside
  // the loop, in the middle of their own work.
  callbacks_running_++;
  try {
    cont(owner_, completion);
  } catch (const std::exception& e) {
    stats_.continuation_exceptions++;
    RPC_LOG_ERROR("Rpc {}: a continuation threw: {}", config_.rpc_id, e.what());
  } catch (...) {
    stats_.continuation_exceptions++;
    RPC_LOG_ERROR("Rpc {}: a continuation threw a non-std exception", config_.rpc_id);
  }
  callbacks_running_--;
}

// REQUIRES: the session no longer accepts requests (not kConnected or
// kConnecting), so continuations cannot queue on it and client_complete
// starts nothing from the backlog.
void RpcImpl::fail_client_requests(Session& session, Errc errc) {
  RPC_ASSERT(!session.is_connected() && session.state != SessionState::kConnecting,
             "requests are failed only on a session that no longer accepts them");
  // Queued packets may point into the request buffers the continuations
  // below hand back to the application.
  tx_flush();
  for (ClientSlot& slot : session.cslots) {
    if (slot.active) client_complete(slot, errc, 0);
  }
  while (!session.backlog.empty()) {
    BacklogEntry e = take_backlog_front(session);
    e.resp->resize(0);
    release_views(*e.req, *e.resp);
    session.stats.requests_completed++;
    stats_.requests_completed++;
    run_continuation(e.cont, Completion{errc, e.resp, 0, e.tag});
  }
}

// Ends a connected client session whose server is gone or unreachable: asks
// the server to free its end (harmless when it is really gone), fails every
// outstanding request (timed_out, if given, first with kTimedOut), frees
// the session and tells the application.
void RpcImpl::reset_client_session(Session& session, Errc errc, SmErr why, bool send_disc,
                                   ClientSlot* timed_out) {
  const SessionNum sn = session.local_num;
  stats_.sessions_reset++;
  set_state(session, SessionState::kDisconnecting);
  if (send_disc) send_disconnect(session);
  if (timed_out != nullptr) {
    tx_flush();  // a rollback in this scan may have queued packets of this session
    client_complete(*timed_out, Errc::kTimedOut, 0);
  }
  fail_client_requests(session, errc);
  free_session(session);
  notify(sn, SessionEvent::kReset, why);
}

// The application ends a connected client session (destroy_session,
// ~Rpc): no new requests, the outstanding ones fail, the server is asked
// to free its end; the answer frees ours.
void RpcImpl::disconnect_client_session(Session& session) {
  // State first: continuations run below and must not queue on it again.
  set_state(session, SessionState::kDisconnecting);
  fail_client_requests(session, Errc::kSessionDestroyed);
  send_disconnect(session);
}

// A server session whose client is gone: freed now, or once the handlers
// that still hold its slots (deferred responses) have responded.
// The client ended the session (kDisconnected) or failed (kReset).
void RpcImpl::end_server_session(Session& session, SessionEvent event, SmErr why) {
  if (session.state == SessionState::kDraining) return;
  notify_server(session, event, why);
  if (session.pending_handlers > 0) {
    set_state(session, SessionState::kDraining);
    return;
  }
  free_session(session);
}

}  // namespace rpc::detail
