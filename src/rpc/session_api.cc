// The session API of an Rpc: create_session and destroy_session.
#include <fmt/format.h>

#include "common/log.h"
#include "common/random.h"
#include "nexus/nexus_impl.h"
#include "rpc/rpc_impl.h"

namespace rpc::detail {

Result<SessionNum> RpcImpl::create_session(const std::string& remote_uri, RpcId remote_rpc_id) {
  RPC_CHECK_OWNER("create_session");
  if (destroying_) return Failure{"create_session: the Rpc is being destroyed"};
  auto addr = parse_uri(remote_uri);
  if (!addr) return Failure{"create_session: " + addr.error()};
  if (remote_rpc_id == kInvalidRpcId) return Failure{"create_session: rpc_id 255 is reserved"};
  if (num_sessions_ >= config_.max_sessions) {
    return Failure{fmt::format("create_session: this Rpc already has max_sessions ({}) sessions",
                               config_.max_sessions)};
  }
  Session* s = alloc_session(SessionRole::kClient, config_.session_credits);
  if (s == nullptr) {
    return Failure{fmt::format("create_session: cannot allocate the session's buffers ({})",
                               allocator_->last_failure_text())};
  }
  hold_remote(*s, *addr, 0);  // learned from the connect response
  s->remote_rpc_id = remote_rpc_id;
  bind_to_connect(*s, random_u64());

  SmMsg m;
  m.type = SmMsgType::kConnectReq;
  m.transport = transport_wire_id_;
  m.client_rpc_id = config_.rpc_id;
  m.server_rpc_id = remote_rpc_id;
  m.client_session_num = s->local_num;
  m.token = s->sm_token;
  m.routing = local_route_;
  // Names the server Rpc to transports that keep one connection per pair of
  // Rpcs (verbs RC): the Nexus address and the rpc_id.
  if (!transport_->prepare_connect(m.routing, addr->key() << 8 | remote_rpc_id)) {
    free_session(*s);
    return Failure{"create_session: the transport cannot set up a connection (out of resources)"};
  }
  s->local_offer = m.routing;
  s->offer_pending = true;
  m.routing_len = RoutingInfo::kMaxBytes;
  m.max_data_per_pkt = static_cast<uint32_t>(caps_.max_data_per_pkt);
  m.session_credits = static_cast<uint16_t>(s->max_credits);  // what our ring admitted
  nexus_.sm_send_request(m, *addr);
  return s->local_num;
}

Result<SessionNum> RpcImpl::connect(const std::string& remote_uri, RpcId remote_rpc_id,
                                    std::chrono::milliseconds timeout) {
  // Before anything else: a connect that fails early must not hide that
  // the caller could never have waited for it here.
  RPC_CHECK_OWNER("connect");
  RPC_CHECK_USAGE(!in_loop_or_callback(),
                  "Rpc {}: connect called from inside the event loop (a continuation, handler, "
                  "coroutine or session callback); it runs the loop, which is not re-entrant: use "
                  "create_session and its session callback",
                  config_.rpc_id);
  const uint64_t failures_before = connect_failures_;
  Result<SessionNum> created = create_session(remote_uri, remote_rpc_id);
  if (!created) return created;
  const SessionNum sn = *created;
  const uint64_t token = sessions_[sn]->sm_token;  // a reused number is another session
  auto ours = [&] { return sessions_[sn] != nullptr && sessions_[sn]->sm_token == token; };
  const uint64_t deadline_ns =
      read_clock() + static_cast<uint64_t>(std::max<int64_t>(timeout.count(), 0)) * 1000000;
  for (;;) {
    if (!ours()) {  // freed: its connect failed (the reason was recorded when it was)
      const bool known = connect_failures_ != failures_before && last_connect_failure_.first == sn;
      return Failure{fmt::format(
          "connect to Rpc {} at {}: {}", remote_rpc_id, remote_uri,
          known ? to_string(last_connect_failure_.second) : std::string_view("connect failed"))};
    }
    if (sessions_[sn]->is_connected()) return sn;
    if (read_clock() >= deadline_ns) break;
    run_event_loop_once();  // aborts when called from inside the event loop
  }
  (void)destroy_session(sn);
  return Failure{fmt::format("connect to Rpc {} at {}: not connected within {} ms", remote_rpc_id,
                             remote_uri, timeout.count())};
}

Result<void> RpcImpl::destroy_session(SessionNum sn) {
  RPC_CHECK_OWNER("destroy_session");
  if (sn >= sessions_.size() || sessions_[sn] == nullptr) {
    return Failure{fmt::format("destroy_session: no session {}", sn)};
  }
  Session& s = *sessions_[sn];
  if (!s.is_client()) {
    return Failure{
        fmt::format("destroy_session: session {} is a server session; its client ends it", sn)};
  }
  if (s.state == SessionState::kConnected) {
    disconnect_client_session(s);
    return {};
  }
  if (s.state == SessionState::kConnecting) {
    set_state(s, SessionState::kConnectingDoomed);  // ended when the connect answer arrives
    fail_client_requests(s, Errc::kSessionDestroyed);
    return {};
  }
  return Failure{fmt::format("destroy_session: session {} is already being destroyed", sn)};
}

}  // namespace rpc::detail
