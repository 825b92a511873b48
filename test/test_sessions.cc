// Session management over the udp transport on 127.0.0.1: connect,
// refusal, timeout, destroy with requests outstanding, and bad arguments.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "rpc/impl_access.h"
#include "rpc_impl_test_access.h"
#include "test_util.h"

using namespace rpc;
using namespace rpc::test;
using namespace std::chrono_literals;

namespace {

// A UDP port on 127.0.0.1 that nothing listens on (bound, then released).
uint16_t unused_udp_port() {
  const int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  socklen_t len = sizeof(addr);
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  ::close(fd);
  return ntohs(addr.sin_port);
}

size_t count_events(const SessionEvents& ev, SessionNum sn, SessionEvent e) {
  return static_cast<size_t>(std::count_if(ev.events.begin(), ev.events.end(), [&](auto& t) {
    return std::get<0>(t) == sn && std::get<1>(t) == e;
  }));
}

// Handler that never responds by itself: it parks the handle until the
// test lets go (state in RpcConfig::context, touched on the server thread).
struct HoldingServer {
  std::vector<ReqHandle*> held;
  std::atomic<bool> release{false};
  std::atomic<uint64_t> released{0};

  static void handler(ReqHandle& h) {
    static_cast<HoldingServer*>(h.context())->held.push_back(&h);
  }

  ServerHooks hooks() {
    return ServerHooks{.on_iteration = [this](Rpc& rpc) {
      if (!release.load() || held.empty()) return;
      for (ReqHandle* h : held) {
        MsgBuffer& pre = h->pre_resp_buffer();
        pre.resize(0);
        rpc.enqueue_response(*h, pre);
        released++;
      }
      held.clear();
    }};
  }
};
constexpr ReqType kHold = 10;

}  // namespace

TEST_CASE("a session connects, and destroying it disconnects both ends") {
  Nexus nexus(local_nexus());
  REQUIRE(nexus.register_handler(kEcho, echo_into_response));
  // Both Rpcs on this thread, driven in turn, so the server can be inspected.
  Rpc server(nexus, RpcConfig{.rpc_id = 1});
  SessionEvents ev;
  Rpc client(nexus, RpcConfig{.rpc_id = 0, .session_callback = ev.callback()});
  CHECK(client.num_active_sessions() == 0);
  auto sn = client.create_session(nexus.uri(), 1);
  REQUIRE(sn);
  CHECK_FALSE(client.is_connected(*sn));
  CHECK(client.num_active_sessions() == 1);

  REQUIRE(run_all_until({&client, &server}, [&] { return ev.has(*sn, SessionEvent::kConnected); }));
  CHECK(client.is_connected(*sn));
  CHECK(ev.reason(*sn, SessionEvent::kConnected) == SmErr::kNone);
  CHECK(server.num_active_sessions() == 1);
  CHECK(client.stats().sessions_created == 1);
  CHECK(server.stats().sessions_created == 1);

  // It carries requests.
  EchoCall call;
  REQUIRE(call.prepare(client, 100, 9));
  REQUIRE(call.enqueue(client, *sn, kEcho) == Errc::kOk);
  REQUIRE(run_all_until({&client, &server}, [&] { return call.completions > 0; }));
  CHECK(call.echoed());
  call.release(client);

  REQUIRE(client.destroy_session(*sn));
  CHECK_FALSE(client.is_connected(*sn));
  REQUIRE(run_all_until({&client, &server}, [&] {
    return ev.has(*sn, SessionEvent::kDisconnected) && server.num_active_sessions() == 0;
  }));
  CHECK(client.num_active_sessions() == 0);
  CHECK(client.session_stats(*sn) == nullptr);
  CHECK(server.stats().sessions_freed == 1);
  CHECK(ev.events.size() == 2);  // kConnected, kDisconnected: nothing else

  // The session is gone.
  EchoCall late;
  REQUIRE(late.prepare(client, 10, 1));
  CHECK(late.enqueue(client, *sn, kEcho) == Errc::kInvalidSession);
  CHECK_FALSE(client.destroy_session(*sn));
  late.release(client);
}

TEST_CASE("a server thread's session count follows its clients' connects and destroys") {
  Nexus nexus(local_nexus());
  ServerThread server(nexus, RpcConfig{.rpc_id = 1});
  SessionEvents ev;
  Rpc client(nexus, RpcConfig{.rpc_id = 0, .session_callback = ev.callback()});
  std::vector<SessionNum> sessions;
  for (int i = 0; i < 3; i++) {
    auto sn = client.create_session(nexus.uri(), 1);
    REQUIRE(sn);
    sessions.push_back(*sn);
  }
  REQUIRE(run_until(client, [&] {
    return std::all_of(sessions.begin(), sessions.end(),
                       [&](SessionNum sn) { return client.is_connected(sn); });
  }));
  CHECK(wait_until([&] { return server.num_active_sessions() == 3; }));
  for (size_t i = 0; i < sessions.size(); i++) {
    REQUIRE(client.destroy_session(sessions[i]));
    REQUIRE(run_until(client, [&] { return ev.has(sessions[i], SessionEvent::kDisconnected); }));
    const size_t left = sessions.size() - i - 1;
    CHECK(wait_until([&] { return server.num_active_sessions() == left; }));
  }
  CHECK(client.num_active_sessions() == 0);
}

TEST_CASE("a burst of a thousand connects to one server loses none of them") {
  // Given Nexuses that would resend a lost session-management request only
  // after 10 s
  const NexusConfig slow_retry{.uri = "127.0.0.1:0", .sm_retry_ms = 10000, .sm_timeout_ms = 20000};
  Nexus server_nexus(slow_retry);
  REQUIRE(server_nexus.register_handler(kEcho, echo_into_response));
  // (a server made for many sessions from one client host)
  ServerThread server(server_nexus,
                      RpcConfig{.rpc_id = 1, .max_sessions = 1100, .max_sessions_per_host = 1100});
  Nexus client_nexus(slow_retry);
  SessionEvents ev;
  Rpc client(client_nexus,
             RpcConfig{.rpc_id = 0, .max_sessions = 1100, .session_callback = ev.callback()});
  // When a client asks for a thousand sessions at once
  constexpr size_t kSessions = 1000;
  for (size_t i = 0; i < kSessions; i++) REQUIRE(client.create_session(server_nexus.uri(), 1));
  // Expect every one connected well before a resend could have happened:
  // no connect request or answer was dropped by a socket's receive buffer
  // (the default one held about 270 of them)
  CHECK(run_until(
      client, [&] { return ev.events.size() == kSessions; }, 5s));
  CHECK(client.num_active_sessions() == kSessions);
  CHECK(client_nexus.stats().retransmissions == 0);
  CHECK(server_nexus.stats().rx_dropped == 0);
}

TEST_CASE("connecting to an rpc_id that does not exist fails with kUnknownRpcId") {
  Nexus nexus(local_nexus());
  ServerThread server(nexus, RpcConfig{.rpc_id = 1});
  SessionEvents ev;
  Rpc client(nexus, RpcConfig{.rpc_id = 0, .session_callback = ev.callback()});
  auto sn = client.create_session(nexus.uri(), 7);
  REQUIRE(sn);
  REQUIRE(run_until(client, [&] { return ev.has(*sn, SessionEvent::kConnectFailed); }));
  CHECK(ev.reason(*sn, SessionEvent::kConnectFailed) == SmErr::kUnknownRpcId);
  CHECK_FALSE(client.is_connected(*sn));
  CHECK(client.num_active_sessions() == 0);
  CHECK(server.num_active_sessions() == 0);
  CHECK(ev.events.size() == 1);
}

TEST_CASE("session credits outside [8, rx_ring_size] are refused at construction") {
  Nexus nexus(local_nexus());
  CHECK_THROWS_WITH(Rpc(nexus, RpcConfig{.rpc_id = 0, .session_credits = 4}),
                    Catch::Contains("session_credits 4 must be within [8,"));
  CHECK_THROWS_WITH(Rpc(nexus, RpcConfig{.rpc_id = 0, .session_credits = 70000}),
                    Catch::Contains("must be within"));
  CHECK_THROWS_WITH(Rpc(nexus, RpcConfig{.rpc_id = 0, .rx_ring_size = 64, .session_credits = 128}),
                    Catch::Contains("below one session's credits (128)"));
}

TEST_CASE("a client reserves the credits it asks for and keeps what the server grants") {
  Nexus nexus(local_nexus());
  REQUIRE(nexus.register_handler(kEcho, echo_into_response));
  // Given a server that grants 16 credits and a client that asks for 64
  // with ring room for two such asks
  ServerThread server(nexus, RpcConfig{.rpc_id = 1, .session_credits = 16});
  SessionEvents ev;
  Rpc client(nexus, RpcConfig{.rpc_id = 0,
                              .rx_ring_size = 128,
                              .session_credits = 64,
                              .session_callback = ev.callback()});
  auto a = client.create_session(nexus.uri(), 1);
  auto b = client.create_session(nexus.uri(), 1);
  REQUIRE(a);
  REQUIRE(b);
  // Expect a third, while both asks are outstanding, admitted beyond the
  // ring with the minimum credits
  auto third = client.create_session(nexus.uri(), 1);
  REQUIRE(third);
  using rpc::detail::RpcImplTestAccess;
  CHECK(RpcImplTestAccess::session(detail::impl_of(client), *third)->max_credits ==
        rpc::detail::kMinSessionCredits);
  CHECK(client.stats().ring_entries_reserved == 128);
  CHECK(client.stats().ring_credits_overcommitted == rpc::detail::kMinSessionCredits);
  // and, once the first two are granted 16 each, ring room for more
  REQUIRE(run_until(client, [&] {
    return client.is_connected(*a) && client.is_connected(*b) && client.is_connected(*third);
  }));
  CHECK(RpcImplTestAccess::session(detail::impl_of(client), *a)->max_credits == 16);
  CHECK(client.stats().ring_entries_reserved == 32);
  auto c = client.create_session(nexus.uri(), 1);
  REQUIRE(c);
  REQUIRE(run_until(client, [&] { return client.is_connected(*c); }));
  CHECK(RpcImplTestAccess::session(detail::impl_of(client), *c)->max_credits == 16);
  CHECK(RpcImplTestAccess::session(detail::impl_of(client), *c)->ring_entries == 16);
  // A large echo works within 16 credits
  EchoCall call;
  REQUIRE(call.prepare(client, 60000, *c));
  REQUIRE(call.enqueue(client, *c, kEcho) == Errc::kOk);
  REQUIRE(run_until(client, [&] { return call.completions > 0; }));
  CHECK(call.echoed());
  call.release(client);
}

TEST_CASE("a server with RX ring room for two sessions admits a third beyond it, and all work") {
  Nexus nexus(local_nexus());
  REQUIRE(nexus.register_handler(kEcho, echo_into_response));
  // 64 ring entries: room for two sessions of 32 credits.
  ServerThread server(nexus, RpcConfig{.rpc_id = 1, .rx_ring_size = 64, .session_credits = 32});
  SessionEvents ev;
  Rpc client(nexus,
             RpcConfig{.rpc_id = 0, .session_credits = 32, .session_callback = ev.callback()});
  auto finished = [&](SessionNum sn) {
    return ev.has(sn, SessionEvent::kConnected) || ev.has(sn, SessionEvent::kConnectFailed);
  };
  // One at a time, so the one admitted beyond the ring is the third.
  std::vector<SessionNum> sessions;
  for (int i = 0; i < 3; i++) {
    auto sn = client.create_session(nexus.uri(), 1);
    REQUIRE(sn);
    REQUIRE(run_until(client, [&] { return finished(*sn); }));
    sessions.push_back(*sn);
  }
  for (SessionNum sn : sessions) CHECK(client.is_connected(sn));
  // (the server thread publishes its count once per loop iteration, maybe
  // after its connect answer has arrived)
  CHECK(wait_until([&] { return server.num_active_sessions() == 3; }));
  // The third got the minimum: its credits hold no ring entry at the server
  using rpc::detail::RpcImplTestAccess;
  CHECK(RpcImplTestAccess::session(detail::impl_of(client), sessions[0])->max_credits == 32);
  CHECK(RpcImplTestAccess::session(detail::impl_of(client), sessions[2])->max_credits ==
        rpc::detail::kMinSessionCredits);

  // All three work, and freeing one makes room again.
  for (SessionNum sn : sessions) {
    EchoCall call;
    REQUIRE(call.prepare(client, 5000, sn));
    REQUIRE(call.enqueue(client, sn, kEcho) == Errc::kOk);
    REQUIRE(run_until(client, [&] { return call.completions > 0; }));
    CHECK(call.echoed());
    call.release(client);
  }
  REQUIRE(client.destroy_session(sessions[0]));
  REQUIRE(run_until(client, [&] { return ev.has(sessions[0], SessionEvent::kDisconnected); }));
  REQUIRE(wait_until([&] { return server.num_active_sessions() == 2; }));
  // Session numbers are reused, so look only at events from now on.
  ev.events.clear();
  auto again = client.create_session(nexus.uri(), 1);
  REQUIRE(again);
  REQUIRE(run_until(client, [&] { return finished(*again); }));
  CHECK(ev.has(*again, SessionEvent::kConnected));
  CHECK(client.is_connected(*again));
  CHECK(RpcImplTestAccess::session(detail::impl_of(client), *again)->max_credits == 32);
  CHECK(wait_until([&] { return server.num_active_sessions() == 3; }));
  server.stop();
  CHECK(server.final_stats().sm_refused == 0);
  CHECK(server.final_stats().ring_entries_reserved == 64);
  CHECK(server.final_stats().ring_credits_overcommitted == rpc::detail::kMinSessionCredits);
}

TEST_CASE("connecting to a port where nothing listens times out and fails waiting requests") {
  Nexus nexus(NexusConfig{.uri = "127.0.0.1:0", .sm_timeout_ms = 300});
  SessionEvents ev;
  Rpc client(nexus, RpcConfig{.rpc_id = 0, .session_callback = ev.callback()});
  auto sn = client.create_session("127.0.0.1:" + std::to_string(unused_udp_port()), 0);
  REQUIRE(sn);
  // Accepted while connecting: they wait for the connect.
  std::vector<EchoCall> calls(20);
  size_t done = 0;
  for (size_t i = 0; i < calls.size(); i++) {
    calls[i].total_done = &done;
    REQUIRE(calls[i].prepare(client, i * 300, i));
    REQUIRE(calls[i].enqueue(client, *sn, kEcho) == Errc::kOk);
  }
  REQUIRE(run_until(client, [&] { return ev.has(*sn, SessionEvent::kConnectFailed); }));
  CHECK(ev.reason(*sn, SessionEvent::kConnectFailed) == SmErr::kTimeout);
  CHECK(done == calls.size());
  for (auto& c : calls) {
    CHECK(c.completions == 1);
    CHECK(c.errc == Errc::kSessionConnectFailed);
    CHECK(c.resp_size == 0);
  }
  CHECK_FALSE(client.is_connected(*sn));
  CHECK(client.num_active_sessions() == 0);
  run_for(client, 50ms);
  CHECK(done == calls.size());
  CHECK(ev.events.size() == 1);
  for (auto& c : calls) c.release(client);
}

TEST_CASE("destroying a session fails each outstanding request once with kSessionDestroyed") {
  Nexus nexus(local_nexus());
  REQUIRE(nexus.register_handler(kHold, HoldingServer::handler));
  HoldingServer holding;
  ServerThread server(nexus, RpcConfig{.rpc_id = 1, .context = &holding}, holding.hooks());
  SessionEvents ev;
  Rpc client(nexus, RpcConfig{.rpc_id = 0, .session_callback = ev.callback()});
  std::vector<EchoCall> calls(50);
  size_t done = 0;
  for (size_t i = 0; i < calls.size(); i++) {
    calls[i].total_done = &done;
    REQUIRE(calls[i].prepare(client, i * 97, i));
  }

  SECTION("while the server holds the requests that reached it") {
    auto sn = client.create_session(nexus.uri(), 1);
    REQUIRE(sn);
    REQUIRE(run_until(client, [&] { return client.is_connected(*sn); }));
    for (auto& c : calls) REQUIRE(c.enqueue(client, *sn, kHold) == Errc::kOk);
    // A window's worth reaches the handler; the rest wait in the backlog.
    REQUIRE(run_until(client, [&] { return server.handlers_run() == 8; }));
    CHECK(done == 0);

    REQUIRE(client.destroy_session(*sn));
    CHECK(done == calls.size());
    CHECK(client.enqueue_request(*sn, kHold, calls[0].req, calls[0].resp, EchoCall::on_done,
                                 &calls[0]) == Errc::kInvalidSession);
    REQUIRE(run_until(client, [&] { return ev.has(*sn, SessionEvent::kDisconnected); }));
    // The server keeps the session until its handlers have responded.
    run_for(client, 20ms);
    CHECK(server.num_active_sessions() == 1);
    holding.release = true;
    CHECK(wait_until([&] { return server.num_active_sessions() == 0; }));
    CHECK(holding.released.load() == 8);
    run_for(client, 20ms);  // responses to a destroyed session are dropped
    CHECK(count_events(ev, *sn, SessionEvent::kDisconnected) == 1);
  }
  SECTION("right after enqueueing, before the session is connected") {
    auto sn = client.create_session(nexus.uri(), 1);
    REQUIRE(sn);
    for (auto& c : calls) REQUIRE(c.enqueue(client, *sn, kHold) == Errc::kOk);
    REQUIRE(client.destroy_session(*sn));
    CHECK(done == calls.size());
    CHECK_FALSE(client.destroy_session(*sn));  // already being destroyed
    REQUIRE(run_until(client, [&] { return ev.has(*sn, SessionEvent::kDisconnected); }));
    CHECK_FALSE(ev.has(*sn, SessionEvent::kConnected));
    CHECK(client.num_active_sessions() == 0);
    // The server end, created by the connect, is freed by the disconnect.
    CHECK(wait_until([&] { return server.num_active_sessions() == 0; }));
    CHECK(server.handlers_run() == 0);
    CHECK(count_events(ev, *sn, SessionEvent::kDisconnected) == 1);
    server.stop();
    CHECK(server.final_stats().sessions_created == 1);
    CHECK(server.final_stats().sessions_freed == 1);
  }

  run_for(client, 20ms);
  CHECK(done == calls.size());
  for (auto& c : calls) {
    CHECK(c.completions == 1);
    CHECK(c.errc == Errc::kSessionDestroyed);
    CHECK(c.resp_size == 0);
  }
  for (auto& c : calls) c.release(client);
}

TEST_CASE("bad arguments to session management fail with clear errors") {
  Nexus nexus(local_nexus());
  REQUIRE(nexus.register_handler(kEcho, echo_into_response));
  Rpc client(nexus, RpcConfig{.rpc_id = 0});

  SECTION("create_session with a malformed URI returns an error naming the URI") {
    for (const std::string uri :
         {"no-port", "127.0.0.1:", ":31850", "127.0.0.1:99999", "127.0.0.1:12x", "127.0.0.1:0"}) {
      INFO("uri " << uri);
      auto sn = client.create_session(uri, 1);
      REQUIRE_FALSE(sn);
      CHECK_THAT(sn.error(), Catch::Contains(uri));
    }
    CHECK(client.num_active_sessions() == 0);
  }
  SECTION("an Rpc with an rpc_id already in use throws rpc::Error") {
    CHECK_THROWS_AS(Rpc(nexus, RpcConfig{.rpc_id = 0}), rpc::Error);
    CHECK_THROWS_WITH(Rpc(nexus, RpcConfig{.rpc_id = 0}), Catch::Contains("already in use"));
    // The failed constructor left the existing Rpc registered and working.
    Rpc other(nexus, RpcConfig{.rpc_id = 1});
    auto sn = client.create_session(nexus.uri(), 1);
    REQUIRE(sn);
    REQUIRE(run_all_until({&client, &other}, [&] { return client.is_connected(*sn); }));
  }
  SECTION("register_handler fails once an Rpc exists") {
    auto r = nexus.register_handler(kEchoBg, echo_into_response);
    REQUIRE_FALSE(r);
    CHECK_THAT(r.error(), Catch::Contains("before any Rpc"));
  }
  SECTION("a Nexus with a malformed URI throws rpc::Error") {
    CHECK_THROWS_AS(Nexus(NexusConfig{.uri = "127.0.0.1"}), rpc::Error);
    CHECK_THROWS_AS(Nexus(NexusConfig{.uri = "127.0.0.1:notaport"}), rpc::Error);
  }
}
