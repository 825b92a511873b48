// Session management on the Rpc thread: answer connect, disconnect and
// session-reset requests and apply their responses (create_session and
// destroy_session: session_api.cc). Messages travel through the Nexus's SM
// thread, which retransmits requests.
#include <fmt/format.h>

#include <algorithm>

#include "common/clock.h"
#include "common/log.h"
#include "common/random.h"
#include "nexus/nexus_impl.h"
#include "rpc/rpc_impl.h"

namespace rpc::detail {

// The disconnect carries the token of the connect that created the session,
// and the server checks it: a late or retransmitted disconnect can then only
// end that very session, never a newer one that reuses its numbers.
void RpcImpl::send_disconnect(Session& session) {
  send_disconnect_for(session.remote_nexus, session.remote_rpc_id, session.local_num,
                      session.remote_num, session.sm_token);
}

void RpcImpl::send_disconnect_for(const NetAddr& to, RpcId server_rpc_id, SessionNum client_sn,
                                  SessionNum server_sn, uint64_t token) {
  SmMsg m;
  m.type = SmMsgType::kDisconnectReq;
  m.transport = transport_wire_id_;
  m.client_rpc_id = config_.rpc_id;
  m.server_rpc_id = server_rpc_id;
  m.client_session_num = client_sn;
  m.server_session_num = server_sn;
  m.token = token;
  nexus_.sm_send_request(m, to);
}

// A server session whose Rpc is going away: its client is told, so that it
// fails its requests at once instead of retransmitting into the void.
void RpcImpl::send_session_reset(Session& session) {
  SmMsg m;
  m.type = SmMsgType::kSessionResetReq;
  m.transport = transport_wire_id_;
  m.client_rpc_id = session.remote_rpc_id;
  m.server_rpc_id = config_.rpc_id;
  m.client_session_num = session.remote_num;
  m.server_session_num = session.local_num;
  m.token = session.sm_token;
  m.err = SmErr::kRemoteRpcGone;
  nexus_.sm_send_session_reset(m, session.remote_nexus);
}

void RpcImpl::send_sm_resp(const SmMsg& req, const NetAddr& to, SmErr err, SessionNum server_sn,
                           const Session* accepted) {
  SmMsg resp = req;
  resp.type = sm_response_type(req.type);
  resp.err = err;
  resp.transport = transport_wire_id_;
  resp.server_session_num = server_sn;
  resp.routing = err == SmErr::kNone ? local_route_ : RoutingInfo{};
  // A connect answer carries what the transport set up for this client.
  if (accepted != nullptr) transport_->fill_connect_answer(accepted->remote_route, resp.routing);
  resp.routing_len = err == SmErr::kNone ? RoutingInfo::kMaxBytes : 0;
  resp.max_data_per_pkt = static_cast<uint32_t>(caps_.max_data_per_pkt);
  resp.session_credits = accepted != nullptr ? static_cast<uint16_t>(accepted->max_credits) : 0;
  if (err != SmErr::kNone) stats_.sm_refused++;
  nexus_.sm_send_response(resp, to);
}

void RpcImpl::handle_sm(const SmDelivery& d) {
  if (d.remote_failure) return handle_remote_failure(d.from, d.msg.incarnation);
  switch (d.msg.type) {
    case SmMsgType::kConnectReq:
      return handle_connect_req(d);
    case SmMsgType::kConnectResp:
      return handle_connect_resp(d);
    case SmMsgType::kDisconnectReq:
      return handle_disconnect_req(d);
    case SmMsgType::kDisconnectResp:
      return handle_disconnect_resp(d);
    case SmMsgType::kSessionResetReq:
      return handle_session_reset_req(d);
    default:
      return;  // heartbeats, probes, reset answers: the Nexus's own business
  }
}

void RpcImpl::handle_connect_req(const SmDelivery& d) {
  const SmMsg& m = d.msg;
  // A retransmitted request whose response was lost: answer it again.
  if (auto it = server_sessions_by_token_.find(m.token); it != server_sessions_by_token_.end()) {
    const Session* s = sessions_[it->second].get();
    if (s != nullptr && s->remote_nexus == d.from && s->remote_rpc_id == m.client_rpc_id &&
        s->remote_num == m.client_session_num) {
      send_sm_resp(m, d.from, SmErr::kNone, s->local_num, s);
    }
    return;
  }
  // The session this request created has ended: a replay, or a very late
  // retransmission. Building it again would leave an orphan nobody ends.
  if (tombstones_.contains(m.token)) {
    stats_.sm_replays_refused++;
    return send_sm_resp(m, d.from, SmErr::kInvalidSession, kInvalidSessionNum);
  }
  if (destroying_) return send_sm_resp(m, d.from, SmErr::kRemoteRpcGone, kInvalidSessionNum);
  if (m.transport != transport_wire_id_)
    return send_sm_resp(m, d.from, SmErr::kTransportMismatch, kInvalidSessionNum);
  // Buffers are laid out by packet size at both ends: packets of another
  // size would be dropped as malformed, and every request retransmitted
  // forever. Refused here, with the reason.
  if (m.max_data_per_pkt != caps_.max_data_per_pkt) {
    return send_sm_resp(m, d.from, SmErr::kPktSizeMismatch, kInvalidSessionNum);
  }
  if (num_sessions_ >= config_.max_sessions) {
    return send_sm_resp(m, d.from, SmErr::kTooManySessions, kInvalidSessionNum);
  }
  // One host may not take every session (and shut the others out).
  auto host_it = hosts_.find(d.from.ipv4);
  if (host_it != hosts_.end() && host_it->second.server_sessions >= max_sessions_per_host_) {
    stats_.sessions_refused_host_share++;
    return send_sm_resp(m, d.from, SmErr::kTooManySessions, kInvalidSessionNum);
  }
  RoutingInfo route = m.routing;
  if (!transport_->resolve_remote_routing_info(route)) {
    return send_sm_resp(m, d.from, SmErr::kInvalidRoutingInfo, kInvalidSessionNum);
  }
  Session* s = alloc_session(SessionRole::kServer, credits_to_grant(m.session_credits));
  if (s == nullptr) {
    transport_->release_remote_routing_info(route);
    RPC_LOG_WARN("Rpc {}: cannot allocate a server session's buffers: {}", config_.rpc_id,
                 allocator_->last_failure_text());
    return send_sm_resp(m, d.from, SmErr::kOutOfMemory, kInvalidSessionNum);
  }
  s->remote_num = m.client_session_num;
  s->remote_rpc_id = m.client_rpc_id;
  if (host_it == hosts_.end()) host_it = hosts_.emplace(d.from.ipv4, RemoteHost{d.from.ipv4}).first;
  s->host = &host_it->second;
  s->host->server_sessions++;
  hold_remote(*s, d.from, m.incarnation);
  s->remote_route = route;
  s->route_resolved = true;
  s->remote_src_key = transport_->src_key_of(route);
  bind_to_connect(*s, m.token);
  server_sessions_by_token_[m.token] = s->local_num;
  stats_.sessions_created++;
  send_sm_resp(m, d.from, SmErr::kNone, s->local_num, s);
  notify_server(*s, SessionEvent::kConnected, SmErr::kNone);
}

void RpcImpl::handle_connect_resp(const SmDelivery& d) {
  const SmMsg& m = d.msg;
  const SessionNum sn = m.client_session_num;
  Session* sp = sn < sessions_.size() ? sessions_[sn].get() : nullptr;
  if (sp == nullptr || !sp->is_client() || sp->sm_token != m.token || !sp->is_connecting()) {
    // An answer for a session that has ended since (or a duplicate of one
    // already applied): a server that accepted it would keep its end
    // forever, so end it, unless the session is ours and connected.
    const bool ours = sp != nullptr && sp->is_client() && sp->sm_token == m.token;
    if (m.err == SmErr::kNone && !ours) {
      send_disconnect_for(d.from, m.server_rpc_id, sn, m.server_session_num, m.token);
    }
    return;
  }
  Session& s = *sp;
  if (s.state == SessionState::kConnectingDoomed) {  // destroy_session() ran while connecting
    if (m.err == SmErr::kNone) {
      s.remote_num = m.server_session_num;
      set_state(s, SessionState::kDisconnecting);
      send_disconnect(s);
    } else {
      free_session(s);
      notify(sn, SessionEvent::kDisconnected, SmErr::kNone);
    }
    return;
  }
  SmErr err = m.err;
  RoutingInfo route = m.routing;
  if (err == SmErr::kNone && m.max_data_per_pkt != caps_.max_data_per_pkt) {
    err = SmErr::kPktSizeMismatch;
  }
  if (err == SmErr::kNone) {
    if (transport_->resolve_connect_answer(route, s.local_offer)) {
      s.offer_pending = false;  // used up by the answer
    } else {
      err = SmErr::kInvalidRoutingInfo;
    }
  }
  if (err != SmErr::kNone) {
    RPC_LOG_INFO("session {} to {} rpc {}: connect failed: {}", sn, s.remote_nexus.to_string(),
                 s.remote_rpc_id, to_string(err));
    // The server accepted, but we cannot use the session: end its side.
    if (m.err == SmErr::kNone) {
      send_disconnect_for(d.from, m.server_rpc_id, sn, m.server_session_num, m.token);
    }
    set_state(s, SessionState::kDisconnecting);
    fail_client_requests(s, Errc::kSessionConnectFailed);
    free_session(s);
    notify(sn, SessionEvent::kConnectFailed, err);
    return;
  }
  s.remote_num = m.server_session_num;
  s.remote_incarnation = m.incarnation;
  // Nothing is in flight while connecting. The server's grant is taken at
  // most at our ask (our ring room) and at least 1 (zero would stall).
  const size_t granted = std::clamp<size_t>(m.session_credits, 1, s.max_credits);
  set_session_credits(s, Admission{granted, std::min(granted, s.ring_entries)});
  if (wheel_ != nullptr && s.credits > kCcInitialWindow) {  // released by the first RTT sample
    s.withheld_credits = s.credits - kCcInitialWindow;
    s.credits = kCcInitialWindow;
  }
  s.remote_route = route;
  s.route_resolved = true;
  s.remote_src_key = transport_->src_key_of(route);
  set_state(s, SessionState::kConnected);
  stats_.sessions_created++;
  if (destroying_) return;  // ~Rpc disconnects it next; nothing is sent or told
  now_ns_ = read_clock();
  start_backlog(s);
  notify(sn, SessionEvent::kConnected, SmErr::kNone);
}

void RpcImpl::handle_disconnect_req(const SmDelivery& d) {
  const SmMsg& m = d.msg;
  const SessionNum sn = m.server_session_num;
  Session* s = sn < sessions_.size() ? sessions_[sn].get() : nullptr;
  // Only the client that owns the session may end it.
  if (s == nullptr || s->is_client() || !s->is_connected() || !(s->remote_nexus == d.from) ||
      s->remote_rpc_id != m.client_rpc_id || s->remote_num != m.client_session_num ||
      s->sm_token != m.token) {
    return send_sm_resp(m, d.from, SmErr::kInvalidSession, sn);
  }
  send_sm_resp(m, d.from, SmErr::kNone, sn);
  end_server_session(*s, SessionEvent::kDisconnected, SmErr::kNone);
}

void RpcImpl::handle_disconnect_resp(const SmDelivery& d) {
  const SmMsg& m = d.msg;
  const SessionNum sn = m.client_session_num;
  if (sn >= sessions_.size() || sessions_[sn] == nullptr) return;
  Session& s = *sessions_[sn];
  if (!s.is_client() || s.sm_token != m.token || s.state != SessionState::kDisconnecting) {
    return;
  }
  free_session(s);
  notify(sn, SessionEvent::kDisconnected, SmErr::kNone);
}

// The server Rpc of one of our sessions was destroyed (its process lives
// on, so heartbeats would never tell). Only that server may say so: the
// message must come from its Nexus and name both ends and the token.
void RpcImpl::handle_session_reset_req(const SmDelivery& d) {
  const SmMsg& m = d.msg;
  const SessionNum sn = m.client_session_num;
  Session* s = sn < sessions_.size() ? sessions_[sn].get() : nullptr;
  const bool valid = s != nullptr && s->is_client() && s->sm_token == m.token &&
                     s->remote_nexus == d.from && s->remote_rpc_id == m.server_rpc_id &&
                     s->remote_num == m.server_session_num &&
                     (s->is_connected() || s->state == SessionState::kDisconnecting);
  send_sm_resp(m, d.from, valid ? SmErr::kNone : SmErr::kInvalidSession, m.server_session_num);
  if (!valid) return;
  if (s->state == SessionState::kDisconnecting) {  // our disconnect will never be answered
    free_session(*s);
    notify(sn, SessionEvent::kDisconnected, SmErr::kRemoteRpcGone);
    return;
  }
  reset_client_session(*s, Errc::kSessionReset, SmErr::kRemoteRpcGone, /*send_disc=*/false);
}

}  // namespace rpc::detail
