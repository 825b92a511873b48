// Nexus lifecycle, and its session-management thread driven by raw
// datagrams: a plain UDP socket in the test plays the remote Nexus, so it
// can send what a forger would and answer probes as the real remote would.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <catch2/catch.hpp>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "nexus/nexus_impl.h"
#include "nexus/sm_thread.h"
#include "rpc/impl_access.h"
#include "rpc/rpc_impl.h"
#include "rpc_impl_test_access.h"
#include "test_util.h"
#include "transport/registry.h"
#include "transport/udp/udp_transport.h"
#include "wire/sm_msg.h"

using namespace rpc;
using namespace rpc::detail;
using namespace rpc::test;
using namespace std::chrono_literals;

namespace {

uint16_t port_of_uri(const std::string& uri) {
  return static_cast<uint16_t>(std::stoi(uri.substr(uri.rfind(':') + 1)));
}

// A plain UDP socket on 127.0.0.1 that sends and receives SM messages.
class SmSock {
 public:
  SmSock() {
    fd_ = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) throw std::system_error(errno, std::generic_category(), "socket");
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      ::close(fd_);
      throw std::system_error(errno, std::generic_category(), "bind");
    }
    port_ = ntohs(a.sin_port);
  }
  ~SmSock() { ::close(fd_); }
  SmSock(const SmSock&) = delete;
  SmSock& operator=(const SmSock&) = delete;

  uint16_t port() const { return port_; }
  NetAddr addr() const { return NetAddr{INADDR_LOOPBACK, port_}; }
  void send(uint16_t to_port, const SmMsg& m) const {
    std::array<uint8_t, kSmMsgBytes> b{};
    encode_sm_msg(m, b);
    send_raw(to_port, b.data(), b.size());
  }
  void send_raw(uint16_t to_port, const uint8_t* data, size_t len) const {
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    to.sin_port = htons(to_port);
    (void)::sendto(fd_, data, len, 0, reinterpret_cast<sockaddr*>(&to), sizeof(to));
  }
  // The next message of `type` within `timeout` (others are skipped).
  std::optional<SmMsg> recv(SmMsgType type, std::chrono::milliseconds timeout) const {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::array<uint8_t, 2048> buf{};
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return std::nullopt;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return std::nullopt;
      const ssize_t n = ::recv(fd_, buf.data(), buf.size(), MSG_DONTWAIT);
      SmMsg m;
      if (n > 0 && decode_sm_msg({buf.data(), static_cast<size_t>(n)}, m) == SmDecodeStatus::kOk &&
          m.type == type) {
        return m;
      }
    }
  }

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
};

constexpr uint64_t kOldIncarnation = 0x01D;
constexpr uint64_t kNewIncarnation = 0x2E4;

SmMsg connect_req(uint16_t reply_port, uint32_t max_data_per_pkt) {
  SmMsg m;
  m.type = SmMsgType::kConnectReq;
  m.transport = rpc::detail::transport_wire_id("udp");
  m.client_rpc_id = 0;
  m.server_rpc_id = 1;
  m.client_session_num = 0;
  m.token = 0xC0FFEE;
  m.incarnation = kOldIncarnation;
  const UdpRoutingInfo u{htonl(INADDR_LOOPBACK), htons(reply_port), kUdpRoutingMagic};
  std::memcpy(m.routing.bytes.data(), &u, sizeof(u));
  m.routing_len = RoutingInfo::kMaxBytes;
  m.max_data_per_pkt = max_data_per_pkt;
  m.session_credits = 32;
  return m;
}

SmMsg heartbeat(uint64_t incarnation) {
  SmMsg m;
  m.type = SmMsgType::kHeartbeat;
  m.incarnation = incarnation;
  return m;
}

// A server Nexus with one server session whose client is `remote`, a test
// socket claiming incarnation kOldIncarnation. Failure detection by silence
// is far off (10 s), so only incarnations can reset the session here.
struct WatchedRemote {
  Nexus nexus{NexusConfig{
      .uri = "127.0.0.1:0", .sm_retry_ms = 20, .sm_timeout_ms = 300, .failure_timeout_ms = 10000}};
  uint32_t max_data_per_pkt = 0;
  ServerThread server{nexus, RpcConfig{.rpc_id = 1}, ServerHooks{.on_start = [this](Rpc& rpc) {
                        max_data_per_pkt = static_cast<uint32_t>(impl_of(rpc).max_data_per_pkt());
                      }}};
  SmSock remote;
  uint16_t sm_port = port_of_uri(nexus.uri());

  WatchedRemote() {
    remote.send(sm_port, connect_req(remote.port(), max_data_per_pkt));
    const auto resp = remote.recv(SmMsgType::kConnectResp, 2s);
    REQUIRE(resp.has_value());
    REQUIRE(resp->err == SmErr::kNone);
    REQUIRE(wait_until([&] { return server.num_active_sessions() == 1; }));
  }
  NexusStats stats() const { return nexus.stats(); }
  // A forged message from the remote's address with another incarnation,
  // and the probe it must cause.
  SmMsg forge_and_expect_probe() {
    remote.send(sm_port, heartbeat(kNewIncarnation));
    const auto probe = remote.recv(SmMsgType::kProbeReq, 2s);
    REQUIRE(probe.has_value());
    return *probe;
  }
  void answer_probe(const SmMsg& probe, uint64_t incarnation, uint64_t nonce) {
    SmMsg resp = probe;
    resp.type = SmMsgType::kProbeResp;
    resp.token = nonce;
    resp.incarnation = incarnation;
    remote.send(sm_port, resp);
  }
};

}  // namespace

TEST_CASE("a Nexus shuts down even when its retry timer fires during shutdown") {
  // Given a 1 ms retry timer, destroy Nexuses at moments that race with
  // it. Before the fix, a queued timer handler re-armed the timer after
  // shutdown and the destructor never returned (the test would time out).
  for (int i = 0; i < 400; i++) {
    rpc::Nexus nexus(rpc::NexusConfig{.uri = "127.0.0.1:0", .sm_retry_ms = 1});
    std::this_thread::sleep_for(std::chrono::microseconds(900 + (i % 200)));
  }
  SUCCEED("every Nexus was destroyed");
}

TEST_CASE("a Nexus rejects a URI without a concrete host or with a bad port") {
  CHECK_THROWS_AS(rpc::Nexus(rpc::NexusConfig{.uri = "0.0.0.0:0"}), rpc::Error);
  CHECK_THROWS_AS(rpc::Nexus(rpc::NexusConfig{.uri = "127.0.0.1"}), rpc::Error);
  CHECK_THROWS_AS(rpc::Nexus(rpc::NexusConfig{.uri = "127.0.0.1:99999"}), rpc::Error);
  CHECK_THROWS_AS(rpc::Nexus(rpc::NexusConfig{.uri = "no.such.host.invalid:1"}), rpc::Error);
}

TEST_CASE("a Nexus reports the port it was given when asked for port 0") {
  rpc::Nexus nexus(rpc::NexusConfig{.uri = "127.0.0.1:0"});
  CHECK(nexus.uri().rfind("127.0.0.1:", 0) == 0);
  CHECK(nexus.uri() != "127.0.0.1:0");
}

TEST_CASE("a Nexus on a taken port names the port and the errno text once") {
  Nexus first(NexusConfig{.uri = "127.0.0.1:0"});
  std::string what;
  try {
    Nexus second(NexusConfig{.uri = first.uri()});
  } catch (const Error& e) {
    what = e.what();
    CHECK(e.code().value() == EADDRINUSE);
  }
  INFO(what);
  CHECK(what.find("cannot bind the session-management socket to " + first.uri()) !=
        std::string::npos);
  const std::string errno_text = std::strerror(EADDRINUSE);
  const size_t at = what.find(errno_text);
  REQUIRE(at != std::string::npos);
  CHECK(what.find(errno_text, at + 1) == std::string::npos);
}

TEST_CASE("destroying a Nexus before its Rpcs aborts and names the live Rpcs") {
  int err_pipe[2];
  REQUIRE(::pipe(err_pipe) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    // Child: the careless caller. Catch2's own SIGABRT handler would turn
    // the abort into an exit.
    ::signal(SIGABRT, SIG_DFL);
    ::dup2(err_pipe[1], STDERR_FILENO);
    ::close(err_pipe[0]);
    auto* nexus = new Nexus(NexusConfig{.uri = "127.0.0.1:0"});
    new Rpc(*nexus, RpcConfig{.rpc_id = 0});
    new Rpc(*nexus, RpcConfig{.rpc_id = 3});
    delete nexus;  // must abort here
    ::_exit(0);
  }
  ::close(err_pipe[1]);
  std::string err;
  char buf[512];
  ssize_t n;
  while ((n = ::read(err_pipe[0], buf, sizeof(buf))) > 0) err.append(buf, static_cast<size_t>(n));
  ::close(err_pipe[0]);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  INFO(err);
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGABRT);
  CHECK(err.find("rpc::Nexus destroyed while Rpc(s) 0, 3 still exist; destroy every Rpc before "
                 "its Nexus") != std::string::npos);
}

TEST_CASE("a Nexus answers a probe with the nonce and its incarnation") {
  Nexus nexus(NexusConfig{.uri = "127.0.0.1:0"});
  SmSock sock;
  SmMsg probe;
  probe.type = SmMsgType::kProbeReq;
  probe.token = 0x1234567890ABCDEFull;
  probe.incarnation = 0x77;
  sock.send(port_of_uri(nexus.uri()), probe);
  const auto resp = sock.recv(SmMsgType::kProbeResp, 2s);
  REQUIRE(resp.has_value());
  CHECK(resp->token == probe.token);
  CHECK(resp->incarnation == impl_of(nexus).incarnation());
  CHECK(nexus.stats().probes_answered == 1);
}

TEST_CASE("a forged incarnation that the remote denies resets nothing") {
  WatchedRemote w;
  // Given a message from the watched remote's address with another
  // incarnation (a forger's: before the fix it reset every session at once)
  const SmMsg probe = w.forge_and_expect_probe();
  CHECK(probe.token != 0);
  // Expect no reset while the probe is outstanding, and no second probe for
  // a second forgery (the first one's retransmission carries the same nonce)
  w.remote.send(w.sm_port, heartbeat(kNewIncarnation + 1));
  const auto again = w.remote.recv(SmMsgType::kProbeReq, 1s);
  REQUIRE(again.has_value());
  CHECK(again->token == probe.token);
  CHECK(w.stats().probes_sent == 1);
  std::this_thread::sleep_for(50ms);
  CHECK(w.server.num_active_sessions() == 1);
  // An answer with the wrong nonce is dropped and counted
  w.answer_probe(probe, kNewIncarnation, probe.token ^ 1);
  REQUIRE(wait_until([&] { return w.stats().probe_resp_dropped == 1; }, 2s));
  // When the real remote answers the probe with the incarnation we know
  w.answer_probe(probe, kOldIncarnation, probe.token);
  // Expect it counted as a forgery, and the session kept
  REQUIRE(wait_until([&] { return w.stats().incarnation_forgeries == 1; }, 2s));
  std::this_thread::sleep_for(100ms);
  CHECK(w.server.num_active_sessions() == 1);
  CHECK(w.stats().remote_failures == 0);
}

TEST_CASE("an unanswered probe changes nothing") {
  WatchedRemote w;
  w.forge_and_expect_probe();
  // Given no answer until the SM timeout (300 ms)
  REQUIRE(wait_until([&] { return w.stats().probe_timeouts == 1; }, 3s));
  // Expect the session kept and the known incarnation to stand: a message
  // with it causes no probe
  CHECK(w.server.num_active_sessions() == 1);
  CHECK(w.stats().remote_failures == 0);
  while (w.remote.recv(SmMsgType::kProbeReq, 50ms)) {
  }
  w.remote.send(w.sm_port, heartbeat(kOldIncarnation));
  CHECK_FALSE(w.remote.recv(SmMsgType::kProbeReq, 200ms).has_value());
  CHECK(w.stats().probes_sent == 1);
}

TEST_CASE("a restart confirmed by the probe resets the sessions and adopts the new incarnation") {
  WatchedRemote w;
  const SmMsg probe = w.forge_and_expect_probe();
  // When the remote answers from its address with the new incarnation
  w.answer_probe(probe, kNewIncarnation, probe.token);
  // Expect the old process declared failed and its session freed
  REQUIRE(wait_until([&] { return w.server.num_active_sessions() == 0; }, 2s));
  CHECK(w.stats().remote_failures == 1);
  CHECK(w.stats().incarnation_forgeries == 0);
}

TEST_CASE("the SM thread rejects requests no Rpc could accept") {
  WatchedRemote w;
  const uint64_t before = w.stats().rx_rejected;
  SmMsg bad_disconnect;
  bad_disconnect.type = SmMsgType::kDisconnectReq;
  bad_disconnect.client_rpc_id = 0;
  bad_disconnect.server_rpc_id = 1;
  bad_disconnect.client_session_num = 0;
  bad_disconnect.server_session_num = kInvalidSessionNum;
  bad_disconnect.token = 0xC0FFEE;
  bad_disconnect.incarnation = kOldIncarnation;
  SmMsg no_routing = connect_req(w.remote.port(), w.max_data_per_pkt);
  no_routing.token = 2;
  no_routing.client_session_num = 1;
  no_routing.routing_len = 0;
  no_routing.routing = {};
  SmMsg no_session = connect_req(w.remote.port(), w.max_data_per_pkt);
  no_session.token = 3;
  no_session.client_session_num = kInvalidSessionNum;
  // Given each, sent by the client of a live session
  for (const SmMsg& m : {bad_disconnect, no_routing, no_session}) w.remote.send(w.sm_port, m);
  // Expect no answer (before the fix the Rpc was handed each one and
  // answered it), each counted, and the session unharmed
  CHECK_FALSE(w.remote.recv(SmMsgType::kDisconnectResp, 300ms).has_value());
  CHECK_FALSE(w.remote.recv(SmMsgType::kConnectResp, 100ms).has_value());
  CHECK(w.stats().rx_rejected == before + 3);
  CHECK(w.server.num_active_sessions() == 1);
}

TEST_CASE("a session reset for an Rpc that does not exist is refused by the SM thread") {
  Nexus nexus(NexusConfig{.uri = "127.0.0.1:0"});
  SmSock sock;
  SmMsg reset;
  reset.type = SmMsgType::kSessionResetReq;
  reset.err = SmErr::kRemoteRpcGone;
  reset.client_rpc_id = 5;
  reset.server_rpc_id = 1;
  reset.client_session_num = 2;
  reset.server_session_num = 3;
  reset.token = 0xABCDEF;
  reset.incarnation = 0x99;
  sock.send(port_of_uri(nexus.uri()), reset);
  const auto resp = sock.recv(SmMsgType::kSessionResetResp, 2s);
  REQUIRE(resp.has_value());
  CHECK(resp->err == SmErr::kUnknownRpcId);
  CHECK(resp->token == reset.token);
}

TEST_CASE("a session reset is retransmitted until answered and its answer is consumed") {
  Nexus nexus(NexusConfig{.uri = "127.0.0.1:0", .sm_retry_ms = 20, .sm_timeout_ms = 2000});
  SmSock client;
  SmMsg reset;
  reset.type = SmMsgType::kSessionResetReq;
  reset.err = SmErr::kRemoteRpcGone;
  reset.client_rpc_id = 0;
  reset.server_rpc_id = 1;
  reset.client_session_num = 4;
  reset.server_session_num = 7;
  reset.token = 0x5E55;
  impl_of(nexus).sm_send_session_reset(reset, client.addr());
  // Expect the request, then its retransmission
  const auto first = client.recv(SmMsgType::kSessionResetReq, 2s);
  REQUIRE(first.has_value());
  CHECK(first->token == reset.token);
  CHECK(first->err == SmErr::kRemoteRpcGone);
  CHECK(first->incarnation == impl_of(nexus).incarnation());
  REQUIRE(client.recv(SmMsgType::kSessionResetReq, 1s).has_value());
  // When the client answers
  SmMsg resp = *first;
  resp.type = SmMsgType::kSessionResetResp;
  resp.incarnation = 0x42;
  client.send(port_of_uri(nexus.uri()), resp);
  std::this_thread::sleep_for(100ms);
  while (client.recv(SmMsgType::kSessionResetReq, 10ms)) {
  }
  // Expect no more retransmissions, and no timeout later
  CHECK_FALSE(client.recv(SmMsgType::kSessionResetReq, 300ms).has_value());
  CHECK(nexus.stats().session_resets_sent == 1);
  CHECK(nexus.stats().timeouts == 0);
}

TEST_CASE("a connect answered after its client Rpc was destroyed is disconnected by the Nexus") {
  Nexus server_nexus(NexusConfig{.uri = "127.0.0.1:0"});
  Nexus client_nexus(NexusConfig{.uri = "127.0.0.1:0", .sm_timeout_ms = 5000});
  // Given a server Rpc that does not run its event loop yet (its answer is slow)
  Rpc server(server_nexus, RpcConfig{.rpc_id = 1});
  {
    // and a client Rpc destroyed while its connect is outstanding
    Rpc client(client_nexus, RpcConfig{.rpc_id = 0});
    REQUIRE(client.create_session(server_nexus.uri(), 1));
    std::this_thread::sleep_for(50ms);  // the connect request reaches the server's queue
  }
  // When the server runs its loop and accepts the connect
  // Expect the session it built to be ended by the client's Nexus
  REQUIRE(run_until(
      server, [&] { return server.num_active_sessions() == 1; }, 5s));
  CHECK(run_until(
      server, [&] { return server.num_active_sessions() == 0; }, 5s));
  CHECK(client_nexus.stats().orphan_disconnects_sent == 1);
}

TEST_CASE("an abandoned connect is not delivered and its session is disconnected") {
  Nexus server_nexus(NexusConfig{.uri = "127.0.0.1:0"});
  Nexus client_nexus(NexusConfig{.uri = "127.0.0.1:0", .sm_timeout_ms = 5000});
  Rpc server(server_nexus, RpcConfig{.rpc_id = 1});
  SessionEvents ev;
  Rpc client(client_nexus, RpcConfig{.rpc_id = 0, .session_callback = ev.callback()});
  // Given a connect the client's Nexus was told to abandon
  auto sn = client.create_session(server_nexus.uri(), 1);
  REQUIRE(sn);
  const Session* s = RpcImplTestAccess::session(impl_of(client), *sn);
  REQUIRE(s != nullptr);
  impl_of(client_nexus).sm_abandon_connect(s->sm_token);
  // When the server accepts it
  REQUIRE(run_until(
      server, [&] { return server.num_active_sessions() == 1; }, 5s));
  // Expect the server's session ended by the Nexus, and nothing delivered
  // to the client Rpc
  CHECK(run_all_until(
      {&server, &client}, [&] { return server.num_active_sessions() == 0; }, 5s));
  CHECK(client_nexus.stats().orphan_disconnects_sent == 1);
  run_for(client, 100ms);
  CHECK(ev.events.empty());
}

TEST_CASE("a connect refused by a peer of another version fails at once with kVersionMismatch") {
  Nexus nexus(NexusConfig{.uri = "127.0.0.1:0", .sm_timeout_ms = 10000});
  SessionEvents ev;
  Rpc client(nexus, RpcConfig{.rpc_id = 0, .session_callback = ev.callback()});
  SmSock v1_peer;
  auto sn = client.create_session("127.0.0.1:" + std::to_string(v1_peer.port()), 1);
  REQUIRE(sn);
  const auto req = v1_peer.recv(SmMsgType::kConnectReq, 2s);
  REQUIRE(req.has_value());
  // Given the peer's refusal in its own version: a v1 response, 80 bytes,
  // whose envelope carries the request's token
  SmMsg refusal = *req;
  refusal.type = SmMsgType::kConnectResp;
  refusal.err = SmErr::kVersionMismatch;
  refusal.incarnation = 0x33;
  std::array<uint8_t, kSmMsgBytes> b{};
  encode_sm_msg(refusal, b);
  b[4] = 1;   // version 1
  b[6] = 80;  // its length
  // (from the peer's own address: a refusal from anyone else is ignored)
  v1_peer.send_raw(port_of_uri(nexus.uri()), b.data(), 80);
  // Expect the connect to fail with that reason long before the 10 s timeout
  REQUIRE(run_until(
      client, [&] { return ev.has(*sn, SessionEvent::kConnectFailed); }, 3s));
  CHECK(ev.reason(*sn, SessionEvent::kConnectFailed) == SmErr::kVersionMismatch);
}

TEST_CASE("a connect answered after it timed out is disconnected by the Nexus") {
  Nexus server_nexus(NexusConfig{.uri = "127.0.0.1:0"});
  Nexus client_nexus(NexusConfig{.uri = "127.0.0.1:0", .sm_retry_ms = 50, .sm_timeout_ms = 200});
  // Given a server Rpc that answers only after the client gave up
  Rpc server(server_nexus, RpcConfig{.rpc_id = 1});
  SessionEvents ev;
  Rpc client(client_nexus, RpcConfig{.rpc_id = 0, .session_callback = ev.callback()});
  auto sn = client.create_session(server_nexus.uri(), 1);
  REQUIRE(sn);
  REQUIRE(run_until(
      client, [&] { return !ev.events.empty(); }, 5s));
  CHECK(std::get<2>(ev.events[0]) == SmErr::kTimeout);
  // When the server accepts it late
  REQUIRE(run_until(
      server, [&] { return server.num_active_sessions() == 1; }, 5s));
  // Expect the session it built ended by the client's Nexus
  CHECK(run_until(
      server, [&] { return server.num_active_sessions() == 0; }, 5s));
  CHECK(client_nexus.stats().orphan_disconnects_sent == 1);
}

TEST_CASE("a connect claiming another incarnation of a known remote builds nothing until probed") {
  WatchedRemote w;
  // Given a forged connect from the remote's address with another
  // incarnation (before the fix it built a session bound to it, which no
  // failure notice would ever name)
  SmMsg forged = connect_req(w.remote.port(), w.max_data_per_pkt);
  forged.token = 0xF00D;
  forged.client_session_num = 1;
  forged.incarnation = kNewIncarnation;
  w.remote.send(w.sm_port, forged);
  const auto probe = w.remote.recv(SmMsgType::kProbeReq, 2s);
  REQUIRE(probe.has_value());
  // Expect it held back while the probe is out
  CHECK_FALSE(w.remote.recv(SmMsgType::kConnectResp, 200ms).has_value());
  CHECK(w.stats().rx_disputed == 1);
  CHECK(w.server.num_active_sessions() == 1);
  // and, once the real remote denies the incarnation, still nothing built
  w.answer_probe(*probe, kOldIncarnation, probe->token);
  REQUIRE(wait_until([&] { return w.stats().incarnation_forgeries == 1; }, 2s));
  w.remote.send(w.sm_port, forged);
  CHECK_FALSE(w.remote.recv(SmMsgType::kConnectResp, 200ms).has_value());
  CHECK(w.server.num_active_sessions() == 1);
}
