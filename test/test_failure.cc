// Failure detection with real processes: heartbeats between Nexuses, and
// session reset when a remote dies or restarts. Servers and clients in
// other processes are the apps (hello_server, hello_client), spawned and
// killed with signals.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <array>
#include <catch2/catch.hpp>

#include "subprocess.h"
#include "test_util.h"

using namespace rpc;
using namespace rpc::test;
using namespace std::chrono_literals;

namespace {

constexpr ReqType kHello = 1;  // hello_server's request type

uint16_t free_udp_port() {
  const int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

std::unique_ptr<Subprocess> start_hello_server(const std::string& uri) {
  auto p = std::make_unique<Subprocess>(
      std::vector<std::string>{RPC_HELLO_SERVER_PATH, "--uri", uri, "--seconds", "60"});
  REQUIRE(p->started());
  REQUIRE(p->wait_for_output("listening on", 10s));
  return p;
}

NexusConfig watchful_nexus(uint32_t failure_timeout_ms) {
  return NexusConfig{
      .uri = "127.0.0.1:0", .heartbeat_interval_ms = 50, .failure_timeout_ms = failure_timeout_ms};
}

// Keeps kWindow requests in flight on a session, counting outcomes.
struct Stream {
  static constexpr size_t kWindow = 8;
  SessionNum sn = kInvalidSessionNum;
  std::array<MsgBuffer, kWindow> req{};
  std::array<MsgBuffer, kWindow> resp{};
  size_t in_flight = 0;
  uint64_t ok = 0;
  uint64_t reset = 0;
  uint64_t other = 0;
  bool keep_going = true;

  static void on_done(Rpc& rpc, const Completion& c) {
    auto* slot = static_cast<std::pair<Stream*, size_t>*>(c.tag);
    Stream& s = *slot->first;
    s.in_flight--;
    if (c.errc == Errc::kOk) {
      s.ok++;
    } else if (c.errc == Errc::kSessionReset) {
      s.reset++;
    } else {
      s.other++;
    }
    if (c.errc == Errc::kOk && s.keep_going) s.send(rpc, slot->second);
  }
  void send(Rpc& rpc, size_t i) {
    if (rpc.enqueue_request(sn, kHello, req[i], resp[i], on_done, &tags[i]) == Errc::kOk) {
      in_flight++;
    }
  }
  void start(Rpc& rpc, SessionNum session) {
    sn = session;
    for (size_t i = 0; i < kWindow; i++) {
      req[i] = rpc.alloc_msg_buffer(32);
      resp[i] = rpc.alloc_msg_buffer(64);
      tags[i] = {this, i};
      send(rpc, i);
    }
  }
  void free(Rpc& rpc) {
    for (size_t i = 0; i < kWindow; i++) {
      rpc.free_msg_buffer(req[i]);
      rpc.free_msg_buffer(resp[i]);
    }
  }
  std::array<std::pair<Stream*, size_t>, kWindow> tags{};
};

SessionNum connect_to(Rpc& rpc, const std::string& uri) {
  auto sn = rpc.create_session(uri, 0);
  REQUIRE(sn);
  REQUIRE(run_until(
      rpc, [&] { return rpc.is_connected(*sn); }, 10s));
  return *sn;
}

}  // namespace

TEST_CASE(
    "a killed server's sessions reset, every request fails, and a restarted server is reachable") {
  const std::string uri = "127.0.0.1:" + std::to_string(free_udp_port());
  auto server = start_hello_server(uri);
  SessionEvents events;
  Nexus nexus(watchful_nexus(500));
  Rpc client(nexus, RpcConfig{.rpc_id = 0, .session_callback = events.callback()});
  const SessionNum sn = connect_to(client, uri);
  Stream stream;
  stream.start(client, sn);
  // Given a stream of requests that works
  REQUIRE(run_until(
      client, [&] { return stream.ok >= 200; }, 10s));
  // When the server process dies in the middle of it
  server->kill(SIGKILL);
  server->wait();
  // Expect the session to be reset and every outstanding request to fail
  REQUIRE(run_until(
      client, [&] { return events.has(sn, SessionEvent::kReset); }, 10s));
  CHECK(events.reason(sn, SessionEvent::kReset) == SmErr::kRemoteFailed);
  CHECK(stream.in_flight == 0);
  CHECK(stream.reset >= 1);
  CHECK(stream.other == 0);
  CHECK_FALSE(client.is_connected(sn));
  CHECK(client.stats().sessions_reset == 1);
  CHECK(client.num_active_sessions() == 0);
  // and the Nexus's counters to say why (Nexus::stats)
  const NexusStats sm = nexus.stats();
  CHECK(sm.remote_failures == 1);
  CHECK(sm.heartbeats_sent >= 1);
  CHECK(sm.rx_msgs >= 1);

  // And a new server on the same port accepts a new session
  auto restarted = start_hello_server(uri);
  const SessionNum sn2 = connect_to(client, uri);
  Stream again;
  again.start(client, sn2);
  CHECK(run_until(
      client, [&] { return again.ok >= 100; }, 10s));
  again.keep_going = false;
  run_until(
      client, [&] { return again.in_flight == 0; }, 10s);
  stream.free(client);
  again.free(client);
}

TEST_CASE("a server frees the sessions of a killed client") {
  Nexus nexus(watchful_nexus(500));
  REQUIRE(nexus.register_handler(kHello, echo_into_response));
  ServerThread server(nexus, RpcConfig{.rpc_id = 0});
  // Given a client process streaming requests
  Subprocess client({RPC_HELLO_CLIENT_PATH, "--server", nexus.uri(), "--count", "100000000"});
  REQUIRE(client.started());
  REQUIRE(wait_until([&] { return server.num_active_sessions() == 1; }, 10s));
  REQUIRE(wait_until([&] { return server.handlers_run() > 100; }, 10s));
  // When it dies
  client.kill(SIGKILL);
  client.wait();
  // Expect the server to free its session
  CHECK(wait_until([&] { return server.num_active_sessions() == 0; }, 10s));
  server.stop();
  CHECK(server.final_stats().sessions_reset == 1);
}

TEST_CASE("a server paused for less than the failure timeout keeps its sessions") {
  const std::string uri = "127.0.0.1:" + std::to_string(free_udp_port());
  auto server = start_hello_server(uri);
  SessionEvents events;
  Nexus nexus(watchful_nexus(2000));
  Rpc client(nexus, RpcConfig{.rpc_id = 0, .session_callback = events.callback()});
  const SessionNum sn = connect_to(client, uri);
  Stream stream;
  stream.start(client, sn);
  REQUIRE(run_until(
      client, [&] { return stream.ok >= 100; }, 10s));
  // Given the server is stopped (SIGSTOP) for 300 ms, then resumed
  server->kill(SIGSTOP);
  run_until(
      client, [] { return false; }, 300ms);
  server->kill(SIGCONT);
  const uint64_t ok_before = stream.ok;
  // Expect requests to keep completing and no reset
  CHECK(run_until(
      client, [&] { return stream.ok >= ok_before + 200; }, 10s));
  stream.keep_going = false;
  CHECK(run_until(
      client, [&] { return stream.in_flight == 0; }, 10s));
  CHECK(stream.reset == 0);
  CHECK(stream.other == 0);
  CHECK_FALSE(events.has(sn, SessionEvent::kReset));
  CHECK(client.is_connected(sn));
  CHECK(client.stats().sessions_reset == 0);
  stream.free(client);
}
