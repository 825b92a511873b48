// Session management on the Rpc thread: create / destroy sessions, answer
// connect and disconnect requests, apply their responses. Messages travel
// through the Nexus's SM thread, which retransmits requests.
#include <fmt/format.h>

#include <random>

#include "common/log.h"
#include "nexus/nexus_impl.h"
#include "rpc/rpc_impl.h"

namespace rpc::detail {

namespace {

uint64_t new_token() {
  thread_local std::mt19937_64 gen{std::random_device{}()};
  return gen();
}

// Binds a new session to its connect request: the token, and the request
// numbers derived from it (see first_req_num).
void bind_to_connect(Session& session, uint64_t token) {
  session.sm_token = token;
  const uint64_t first = first_req_num(token);
  for (size_t i = 0; i < kSessionReqWindow; i++) {
    session.cslots[i].next_req_num = first + i;
    session.sslots[i].req_num = first + i;  // the first request number the slot expects
  }
}

}  // namespace

size_t RpcImpl::ring_room_sessions() const { return caps_.rx_ring_size / kSessionCredits; }

Session* RpcImpl::alloc_session(SessionRole role) {
  if (num_sessions_ >= config_.max_sessions) return nullptr;
  auto s = std::make_unique<Session>();
  s->role = role;
  bool ok = true;
  for (size_t i = 0; i < kSessionReqWindow; i++) {
    ClientSlot& c = s->cslots[i];
    c.session = s.get();
    c.index = static_cast<uint8_t>(i);
    ServerSlot& v = s->sslots[i];
    v.session = s.get();
    ReqHandleAccess::init(v.handle, &owner_, config_.context, &v);
    if (role == SessionRole::kServer) {
      ReqHandleAccess::pre_resp(v.handle) = alloc_msg_buffer(caps_.max_data_per_pkt);
      ok = ok && ReqHandleAccess::pre_resp(v.handle).valid();
    }
    if (caps_.bulk) {
      MsgBuffer& ctrl = role == SessionRole::kServer ? v.bulk_ctrl : c.bulk_ctrl;
      ctrl = alloc_msg_buffer(sizeof(BulkCtrl));
      ok = ok && ctrl.valid();
    }
  }
  SessionNum sn;
  if (free_session_nums_.empty()) {
    sn = static_cast<SessionNum>(sessions_.size());
    sessions_.emplace_back();
  } else {
    sn = free_session_nums_.back();
    free_session_nums_.pop_back();
  }
  s->local_num = sn;
  sessions_[sn] = std::move(s);
  num_sessions_++;
  if (!ok) {
    free_session(*sessions_[sn]);
    return nullptr;
  }
  return sessions_[sn].get();
}

void RpcImpl::free_session(Session& session) {
  for (ServerSlot& slot : session.sslots) {
    release_server_slot(slot);
    free_msg_buffer(ReqHandleAccess::pre_resp(slot.handle));
    free_msg_buffer(slot.bulk_ctrl);
  }
  for (ClientSlot& slot : session.cslots) {
    free_msg_buffer(slot.bulk_ctrl);
    if (slot.in_stall_queue) std::erase(stall_queue_, &slot);
  }
  if (session.role == SessionRole::kServer) server_sessions_by_token_.erase(session.sm_token);
  if (session.holds_remote_ref) nexus_.release_remote(session.remote_nexus);
  const SessionNum sn = session.local_num;
  sessions_[sn].reset();
  free_session_nums_.push_back(sn);
  num_sessions_--;
  stats_.sessions_freed++;
}

void RpcImpl::notify(SessionNum sn, SessionEvent event, SmErr err) {
  if (config_.session_callback) config_.session_callback(sn, event, err);
}

void RpcImpl::fail_client_requests(Session& session, Errc errc) {
  for (ClientSlot& slot : session.cslots) {
    if (slot.active) client_complete(slot, errc, 0);
  }
  while (!session.backlog.empty()) {
    const BacklogEntry e = session.backlog.front();
    session.backlog.pop_front();
    e.resp->resize(0);
    session.stats.requests_completed++;
    stats_.requests_completed++;
    e.cont(owner_, Completion{errc, e.resp, 0, e.tag});
  }
}

Result<SessionNum> RpcImpl::create_session(const std::string& remote_uri, RpcId remote_rpc_id) {
  auto addr = parse_uri(remote_uri);
  if (!addr) return Failure{"create_session: " + addr.error()};
  if (remote_rpc_id == kInvalidRpcId) return Failure{"create_session: rpc_id 255 is reserved"};
  if (num_sessions_ >= config_.max_sessions) {
    return Failure{fmt::format("create_session: this Rpc already has max_sessions ({}) sessions",
                               config_.max_sessions)};
  }
  if (num_sessions_ + 1 > ring_room_sessions()) {
    return Failure{fmt::format(
        "create_session: no RX ring room for another session ({} ring entries, {} per session)",
        caps_.rx_ring_size, kSessionCredits)};
  }
  Session* s = alloc_session(SessionRole::kClient);
  if (s == nullptr) return Failure{"create_session: out of memory for session buffers"};
  hold_remote(*s, *addr, 0);  // learned from the connect response
  s->remote_rpc_id = remote_rpc_id;
  s->state = SessionState::kConnectInProgress;
  bind_to_connect(*s, new_token());

  SmMsg m;
  m.type = SmMsgType::kConnectReq;
  m.transport = transport_kind_;
  m.client_rpc_id = config_.rpc_id;
  m.server_rpc_id = remote_rpc_id;
  m.client_session_num = s->local_num;
  m.token = s->sm_token;
  m.routing = local_route_;
  m.routing_len = RoutingInfo::kMaxBytes;
  nexus_.sm_send_request(m, *addr);
  return s->local_num;
}

Result<bool> RpcImpl::destroy_session(SessionNum sn) {
  if (sn >= sessions_.size() || sessions_[sn] == nullptr) {
    return Failure{fmt::format("destroy_session: no session {}", sn)};
  }
  Session& s = *sessions_[sn];
  if (!s.is_client()) {
    return Failure{
        fmt::format("destroy_session: session {} is a server session; its client "
                    "ends it",
                    sn)};
  }
  if (s.state == SessionState::kDisconnectInProgress) {
    return Failure{fmt::format("destroy_session: session {} is already being destroyed", sn)};
  }
  const bool was_connected = s.is_connected();
  // State first: continuations run below and must not queue on it again.
  s.state = SessionState::kDisconnectInProgress;
  fail_client_requests(s, Errc::kSessionDestroyed);
  if (was_connected) {
    send_disconnect(s);
  } else {
    s.destroy_requested = true;  // finished when the connect response arrives
  }
  return true;
}

// The disconnect carries the token of the connect that created the session,
// and the server checks it: a late or retransmitted disconnect can then only
// end that very session, never a newer one that reuses its numbers.
void RpcImpl::send_disconnect(Session& session) {
  SmMsg m;
  m.type = SmMsgType::kDisconnectReq;
  m.transport = transport_kind_;
  m.client_rpc_id = config_.rpc_id;
  m.server_rpc_id = session.remote_rpc_id;
  m.client_session_num = session.local_num;
  m.server_session_num = session.remote_num;
  m.token = session.sm_token;
  nexus_.sm_send_request(m, session.remote_nexus);
}

void RpcImpl::send_sm_resp(const SmMsg& req, const NetAddr& to, SmErr err, SessionNum server_sn) {
  SmMsg resp = req;
  resp.type =
      req.type == SmMsgType::kConnectReq ? SmMsgType::kConnectResp : SmMsgType::kDisconnectResp;
  resp.err = err;
  resp.transport = transport_kind_;
  resp.server_session_num = server_sn;
  resp.routing = err == SmErr::kNone ? local_route_ : RoutingInfo{};
  resp.routing_len = err == SmErr::kNone ? RoutingInfo::kMaxBytes : 0;
  if (err != SmErr::kNone) stats_.sm_refused++;
  nexus_.sm_send_response(resp, to);
}

void RpcImpl::handle_sm(const SmDelivery& d) {
  if (d.remote_failure) return handle_remote_failure(d.from, d.msg.incarnation);
  switch (d.msg.type) {
    case SmMsgType::kConnectReq:
      handle_connect_req(d);
      return;
    case SmMsgType::kConnectResp:
      handle_connect_resp(d);
      return;
    case SmMsgType::kDisconnectReq:
      handle_disconnect_req(d);
      return;
    case SmMsgType::kDisconnectResp:
      handle_disconnect_resp(d);
      return;
    case SmMsgType::kHeartbeat:
      return;  // consumed by the Nexus
  }
}

void RpcImpl::handle_connect_req(const SmDelivery& d) {
  const SmMsg& m = d.msg;
  // A retransmitted request whose response was lost: answer it again.
  if (auto it = server_sessions_by_token_.find(m.token); it != server_sessions_by_token_.end()) {
    const Session* s = sessions_[it->second].get();
    if (s != nullptr && s->remote_nexus == d.from && s->remote_rpc_id == m.client_rpc_id &&
        s->remote_num == m.client_session_num) {
      send_sm_resp(m, d.from, SmErr::kNone, s->local_num);
    }
    return;
  }
  if (m.transport != transport_kind_)
    return send_sm_resp(m, d.from, SmErr::kTransportMismatch, kInvalidSessionNum);
  if (num_sessions_ >= config_.max_sessions) {
    return send_sm_resp(m, d.from, SmErr::kTooManySessions, kInvalidSessionNum);
  }
  if (num_sessions_ + 1 > ring_room_sessions()) {
    return send_sm_resp(m, d.from, SmErr::kNoRingRoom, kInvalidSessionNum);
  }
  RoutingInfo route = m.routing;
  if (!transport_->resolve_remote_routing_info(route)) {
    return send_sm_resp(m, d.from, SmErr::kInvalidRoutingInfo, kInvalidSessionNum);
  }
  Session* s = alloc_session(SessionRole::kServer);
  if (s == nullptr) return send_sm_resp(m, d.from, SmErr::kTooManySessions, kInvalidSessionNum);
  s->state = SessionState::kConnected;
  s->remote_num = m.client_session_num;
  s->remote_rpc_id = m.client_rpc_id;
  hold_remote(*s, d.from, m.incarnation);
  s->remote_route = route;
  s->remote_src_key = transport_->src_key_of(route);
  bind_to_connect(*s, m.token);
  server_sessions_by_token_[m.token] = s->local_num;
  stats_.sessions_created++;
  send_sm_resp(m, d.from, SmErr::kNone, s->local_num);
}

void RpcImpl::handle_connect_resp(const SmDelivery& d) {
  const SmMsg& m = d.msg;
  const SessionNum sn = m.client_session_num;
  if (sn >= sessions_.size() || sessions_[sn] == nullptr) return;
  Session& s = *sessions_[sn];
  if (!s.is_client() || s.sm_token != m.token ||
      (s.state != SessionState::kConnectInProgress && !s.destroy_requested)) {
    return;
  }
  if (s.destroy_requested) {  // destroy_session() ran while connecting
    if (m.err == SmErr::kNone) {
      s.remote_num = m.server_session_num;
      send_disconnect(s);
    } else {
      free_session(s);
      notify(sn, SessionEvent::kDisconnected, SmErr::kNone);
    }
    return;
  }
  SmErr err = m.err;
  RoutingInfo route = m.routing;
  if (err == SmErr::kNone && !transport_->resolve_remote_routing_info(route)) {
    err = SmErr::kInvalidRoutingInfo;
  }
  if (err != SmErr::kNone) {
    RPC_LOG_INFO("session {} to {} rpc {}: connect failed: {}", sn, s.remote_nexus.to_string(),
                 s.remote_rpc_id, to_string(err));
    s.state = SessionState::kDisconnectInProgress;
    fail_client_requests(s, Errc::kSessionConnectFailed);
    free_session(s);
    notify(sn, SessionEvent::kConnectFailed, err);
    return;
  }
  s.remote_num = m.server_session_num;
  s.remote_incarnation = m.incarnation;
  s.remote_route = route;
  s.remote_src_key = transport_->src_key_of(route);
  s.state = SessionState::kConnected;
  stats_.sessions_created++;
  for (ClientSlot& slot : s.cslots) {
    if (s.backlog.empty()) break;
    if (slot.active) continue;
    const BacklogEntry e = s.backlog.front();
    s.backlog.pop_front();
    start_request(slot, e);
  }
  notify(sn, SessionEvent::kConnected, SmErr::kNone);
}

void RpcImpl::handle_disconnect_req(const SmDelivery& d) {
  const SmMsg& m = d.msg;
  const SessionNum sn = m.server_session_num;
  Session* s = sn < sessions_.size() ? sessions_[sn].get() : nullptr;
  // Only the client that owns the session may end it.
  if (s == nullptr || s->is_client() || s->zombie || !(s->remote_nexus == d.from) ||
      s->remote_rpc_id != m.client_rpc_id || s->remote_num != m.client_session_num ||
      s->sm_token != m.token) {
    return send_sm_resp(m, d.from, SmErr::kInvalidSession, sn);
  }
  send_sm_resp(m, d.from, SmErr::kNone, sn);
  if (s->pending_handlers > 0) {
    s->zombie = true;  // freed when the last deferred response arrives
    return;
  }
  free_session(*s);
}

void RpcImpl::handle_disconnect_resp(const SmDelivery& d) {
  const SmMsg& m = d.msg;
  const SessionNum sn = m.client_session_num;
  if (sn >= sessions_.size() || sessions_[sn] == nullptr) return;
  Session& s = *sessions_[sn];
  if (!s.is_client() || s.sm_token != m.token || s.state != SessionState::kDisconnectInProgress) {
    return;
  }
  free_session(s);
  notify(sn, SessionEvent::kDisconnected, SmErr::kNone);
}

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
  for (size_t sn = 0; sn < sessions_.size(); sn++) {
    Session* s = sessions_[sn].get();
    if (s == nullptr || !(s->remote_nexus == remote) || s->remote_incarnation != incarnation ||
        s->zombie) {
      continue;
    }
    const auto num = static_cast<SessionNum>(sn);
    if (!s->is_client()) {
      stats_.sessions_reset++;
      if (s->pending_handlers > 0) {
        s->zombie = true;  // freed when its last handler responds
      } else {
        free_session(*s);
      }
      continue;
    }
    if (s->state == SessionState::kConnected) {
      stats_.sessions_reset++;
      // The server may be alive after all (a link that came back just as
      // the timeout expired): ask it to free its end, or it would keep it
      // until this process dies. Harmless when it is really gone.
      send_disconnect(*s);
      s->state = SessionState::kDisconnectInProgress;
      fail_client_requests(*s, Errc::kSessionReset);
      free_session(*s);
      notify(num, SessionEvent::kReset, SmErr::kRemoteFailed);
    } else if (s->state == SessionState::kDisconnectInProgress && !s->destroy_requested) {
      free_session(*s);  // its disconnect request would only time out
      notify(num, SessionEvent::kDisconnected, SmErr::kRemoteFailed);
    }
  }
}

}  // namespace rpc::detail
