// Hostile input: malformed, forged and flooding datagrams sent at a server
// while legitimate traffic runs. Over udp on 127.0.0.1 a third party can
// reach the server's datapath port and its Nexus's session-management
// port, but cannot send from the client's address, so every datapath
// packet it sends stops at header validation or the source check. Packets
// forged with the peer's own address (which reach the protocol logic) are
// sent over the `fake` transport, and fuzzed in test/fuzz/fuzz_engine_rx.cc.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <catch2/catch.hpp>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "hostile_udp.h"
#include "rpc/impl_access.h"
#include "rpc/rpc_impl.h"
#include "rpc_impl_test_access.h"
#include "test_util.h"
#include "transport/fake/fake_transport.h"
#include "transport/registry.h"
#include "transport/udp/udp_transport.h"
#include "wire/pkt_hdr.h"
#include "wire/sm_msg.h"

using namespace rpc;
using namespace rpc::detail;
using namespace rpc::test;
using namespace rpc::test::hostile;
using namespace std::chrono_literals;

namespace {

// Legitimate echo requests kept in flight on one session, each checked
// byte for byte when it completes.
class EchoStream {
 public:
  EchoStream(Rpc& rpc, SessionNum sn, size_t window) : rpc_(rpc), sn_(sn), calls_(window) {
    for (auto& c : calls_) start(c);
  }
  // Checks and restarts what finished; false once anything came back wrong.
  bool poll(bool restart) {
    for (auto& c : calls_) {
      if (c == nullptr || c->completions == 0) continue;
      if (!c->echoed()) {
        bad_++;
        UNSCOPED_INFO("request of " << c->size << " bytes: completions " << c->completions
                                    << ", errc " << static_cast<int>(c->errc) << ", resp_size "
                                    << c->resp_size);
      }
      completed_++;
      c->release(rpc_);
      c.reset();
      if (restart) start(c);
    }
    return bad_ == 0;
  }
  bool idle() const {
    return std::all_of(calls_.begin(), calls_.end(), [](auto& c) { return c == nullptr; });
  }
  size_t completed() const { return completed_; }
  size_t bad() const { return bad_; }
  size_t enqueue_failures() const { return enqueue_failures_; }

 private:
  void start(std::unique_ptr<EchoCall>& c) {
    static constexpr std::array<size_t, 8> kSizes = {0, 1, 32, 1000, 1456, 1457, 5000, 20000};
    c = std::make_unique<EchoCall>();
    const size_t size = kSizes[next_ % kSizes.size()];
    REQUIRE(c->prepare(rpc_, size, next_++));
    if (c->enqueue(rpc_, sn_, kEcho) != Errc::kOk) {
      enqueue_failures_++;
      c->release(rpc_);
      c.reset();
    }
  }

  Rpc& rpc_;
  SessionNum sn_;
  std::vector<std::unique_ptr<EchoCall>> calls_;
  uint64_t next_ = 1;
  size_t completed_ = 0;
  size_t bad_ = 0;
  size_t enqueue_failures_ = 0;
};

// What the blaster sent, and which refusals came back on its SM socket.
struct BlastReport {
  size_t datapath_sent = 0;
  size_t sm_sent = 0;
  std::array<size_t, 256> sm_refusals{};  // by SmErr (any byte a reply may carry)
  size_t sm_accepted = 0;                 // must stay 0: nothing it sends is acceptable
};

// Sends hostile datagrams to the server's datapath and SM ports until told
// to stop. real_sn: the server-side number of the legitimate session;
// client_sn / client_rpc: the client end, for forged disconnects.
void blast(uint16_t data_port, uint16_t sm_port, SessionNum real_sn, SessionNum client_sn,
           const std::atomic<bool>& stop, BlastReport& report) {
  UdpSock sock;
  std::mt19937_64 rng(0xB1A57);
  auto rnd = [&](uint64_t n) { return rng() % n; };
  std::vector<uint8_t> rx(2048);

  auto datapath_once = [&] {
    switch (rnd(11)) {
      case 0: {  // random bytes, any length up to the MTU
        std::vector<uint8_t> b(rnd(1473));
        for (auto& x : b) x = static_cast<uint8_t>(rng());
        sock.send(data_port, b);
        break;
      }
      case 1: {  // a valid header, truncated
        auto b = pkt(req_hdr(8, real_sn), 8);
        b.resize(rnd(kPktHeaderBytes));
        sock.send(data_port, b);
        break;
      }
      case 2: {  // bad magic
        PktHdr h = req_hdr(8, real_sn);
        h.w1 = (h.w1 & ~(uint64_t{0xF} << 44)) | (rnd(kPktMagic) << 44);
        sock.send(data_port, pkt(h, 8));
        break;
      }
      case 3:  // unknown session numbers
        sock.send(data_port,
                  pkt(req_hdr(8, static_cast<SessionNum>(100 + rnd(0xFFFF - 100)), 0, rnd(64)), 8));
        break;
      case 4:  // msg_size far beyond the data carried, or beyond any message
        sock.send(
            data_port,
            pkt(req_hdr(static_cast<uint32_t>(kMaxMsgSizeField - rnd(1000)), real_sn), rnd(100)));
        break;
      case 5:  // pkt_num beyond the message
        sock.send(data_port, pkt(req_hdr(100, real_sn, static_cast<uint16_t>(1 + rnd(100))), 100));
        break;
      case 6:  // stale and future request numbers on the real session
        sock.send(data_port, pkt(req_hdr(32, real_sn, 0, rnd(1 << 20)), 32));
        break;
      case 7:  // a bulk control packet on a transport without one-sided reads
        sock.send(data_port, pkt(PktHdr::make(PktType::kReq, kEcho, 1 << 20, real_sn, 0, 0, true),
                                 kBulkCtrlBytes));
        break;
      case 8:  // RFRs, credit returns and responses to the server's session
        sock.send(data_port, pkt(PktHdr::make(static_cast<PktType>(1 + rnd(3)), kEcho, 0, real_sn,
                                              static_cast<uint16_t>(rnd(4)), rnd(64)),
                                 0));
        break;
      case 9:  // control packets carrying data
        sock.send(data_port,
                  pkt(PktHdr::make(PktType::kRfr, kEcho, 0, real_sn, 1, 0), 1 + rnd(64)));
        break;
      case 10: {  // larger than the MTU: truncated by the kernel, dropped
        std::vector<uint8_t> b = pkt(req_hdr(3000, real_sn), 3000 - kPktHeaderBytes);
        sock.send(data_port, b);
        break;
      }
    }
    report.datapath_sent++;
  };

  auto sm_once = [&] {
    SmMsg m = connect_req(rng(), sock.port(), static_cast<SessionNum>(rnd(100)), 1 + rnd(1 << 20));
    switch (rnd(12)) {
      case 0: {  // random bytes
        std::vector<uint8_t> b(rnd(200));
        for (auto& x : b) x = static_cast<uint8_t>(rng());
        sock.send(sm_port, b);
        report.sm_sent++;
        return;
      }
      case 1:  // routing info of another transport (wrong magic)
        m.routing =
            udp_route(sock.port(), static_cast<uint16_t>(kUdpRoutingMagic ^ (1 + rnd(0xFFFE))));
        break;
      case 2:  // routing info too short to hold an address
        m.routing_len = static_cast<uint8_t>(rnd(6));
        break;
      case 3:  // routing_len beyond the field: refused by the decoder
        m.routing_len = static_cast<uint8_t>(RoutingInfo::kMaxBytes + 1 + rnd(200));
        break;
      case 4:  // an Rpc that does not exist
        m.server_rpc_id = static_cast<RpcId>(2 + rnd(200));
        break;
      case 5:  // another transport
        m.transport = rpc::detail::transport_wire_id("fake");
        break;
      case 6:  // a disconnect of the real session, from a foreign address
        m.type = SmMsgType::kDisconnectReq;
        m.server_session_num = real_sn;
        m.client_session_num = client_sn;
        break;
      case 7:  // disconnects of sessions that do not exist
        m.type = SmMsgType::kDisconnectReq;
        m.server_session_num = static_cast<SessionNum>(rnd(0x10000));
        break;
      case 8:  // heartbeats claiming some incarnation
        m.type = SmMsgType::kHeartbeat;
        break;
      case 9:  // responses nobody asked for
        m.type = rnd(2) ? SmMsgType::kConnectResp : SmMsgType::kDisconnectResp;
        m.err = static_cast<SmErr>(rnd(10));
        break;
      case 10: {  // another protocol version
        auto b = sm_bytes(m);
        b[4] = static_cast<uint8_t>(kSmVersion + 1 + rnd(100));
        sock.send(sm_port, b);
        report.sm_sent++;
        return;
      }
      case 11: {  // a valid connect, cut short or padded
        auto b = sm_bytes(m);
        b.resize(rnd(2) ? kSmEnvelopeBytes + rnd(kSmMsgBytes - kSmEnvelopeBytes)
                        : kSmMsgBytes + 1 + rnd(100));
        sock.send(sm_port, b);
        report.sm_sent++;
        return;
      }
    }
    if (m.type == SmMsgType::kConnectReq && m.err == SmErr::kNone && rnd(8) == 0) {
      m.incarnation = 0;        // never stamped by a real Nexus: ignored
      m.routing.bytes[6] ^= 1;  // and not a valid route either, should it get through
    }
    sock.send(sm_port, sm_bytes(m));
    report.sm_sent++;
  };

  auto drain_replies = [&](std::chrono::milliseconds wait) {
    for (;;) {
      const ssize_t n = sock.recv(rx.data(), rx.size(), wait);
      if (n < 0) return;
      SmMsg r;
      if (decode_sm_msg({rx.data(), static_cast<size_t>(n)}, r) != SmDecodeStatus::kOk) continue;
      if (r.type != SmMsgType::kConnectResp && r.type != SmMsgType::kDisconnectResp) continue;
      if (r.err == SmErr::kNone) {
        report.sm_accepted++;
      } else {
        report.sm_refusals[static_cast<size_t>(r.err)]++;
      }
    }
  };

  while (!stop.load(std::memory_order_relaxed)) {
    for (int i = 0; i < 64; i++) datapath_once();
    sm_once();
    drain_replies(0ms);
    std::this_thread::sleep_for(200us);  // leave the legitimate traffic some room
  }
  drain_replies(200ms);
}

}  // namespace

TEST_CASE("malformed datagrams over udp are dropped and counted by reason") {
  Nexus nexus(local_nexus());
  REQUIRE(nexus.register_handler(kEcho, echo_into_response));
  Rpc server(nexus, RpcConfig{.rpc_id = 1});
  Rpc client(nexus, RpcConfig{.rpc_id = 0});
  auto sn = client.create_session(nexus.uri(), 1);
  REQUIRE(sn);
  REQUIRE(run_all_until({&client, &server}, [&] { return client.is_connected(*sn); }));
  const uint16_t port = datapath_port(server);
  UdpSock intruder;
  const RpcStats& s = server.stats();
  const SessionNum real = 0;  // the server end of the only session

  // Sends one datagram and waits until the server has looked at it.
  auto send = [&](const std::vector<uint8_t>& b) {
    const uint64_t before = s.rx_pkts;
    intruder.send(port, b);
    REQUIRE(run_all_until({&client, &server}, [&] { return s.rx_pkts > before; }));
  };
  const DropCounters d0 = s.drops;
  send(std::vector<uint8_t>(8, kPktMagic));
  CHECK(s.drops.too_short == d0.too_short + 1);
  send({});
  CHECK(s.drops.too_short == d0.too_short + 2);
  PktHdr bad_magic = req_hdr(8, real);
  bad_magic.w1 &= ~(uint64_t{0xF} << 44);
  send(pkt(bad_magic, 8));
  CHECK(s.drops.bad_magic == d0.bad_magic + 1);
  send(pkt(req_hdr(100, real), 4));       // msg_size beyond the data carried
  send(pkt(req_hdr(100, real, 5), 100));  // pkt_num beyond the message
  send(pkt(PktHdr::make(PktType::kReq, kEcho, 1 << 20, real, 0, 0, true), kBulkCtrlBytes));
  send(pkt(PktHdr::make(PktType::kRfr, kEcho, 0, real, 1, 0), 8));  // an RFR with data
  CHECK(s.drops.bad_header == d0.bad_header + 4);
  send(pkt(req_hdr(8, 999), 8));
  send(pkt(req_hdr(8, kInvalidSessionNum), 8));
  CHECK(s.drops.unknown_session == d0.unknown_session + 2);
  send(pkt(req_hdr(8, real), 8));  // well formed, right session, wrong sender
  send(pkt(req_hdr(8, real, 0, 12345), 8));
  CHECK(s.drops.wrong_source == d0.wrong_source + 2);
  // Larger than the MTU: the kernel truncates it and the transport drops it
  // before the engine sees it; the next datagram is counted normally.
  intruder.send(port, pkt(req_hdr(3000, real), 3000 - kPktHeaderBytes));
  send(std::vector<uint8_t>(3, 0));
  CHECK(s.drops.too_short == d0.too_short + 3);
  CHECK(server.stats().drops.oversized == d0.oversized + 1);
  CHECK(s.handlers_run == 0);
  CHECK(s.drops.stale == d0.stale);

  // And the session is untouched.
  EchoCall call;
  REQUIRE(call.prepare(client, 3000, 7));
  REQUIRE(call.enqueue(client, *sn, kEcho) == Errc::kOk);
  REQUIRE(run_all_until({&client, &server}, [&] { return call.completions > 0; }));
  CHECK(call.echoed());
  call.release(client);
}

TEST_CASE("a blaster of malformed and forged datagrams does not disturb a live session") {
  Nexus server_nexus(local_nexus());
  REQUIRE(server_nexus.register_handler(kEcho, echo_into_response));
  std::atomic<uint16_t> data_port{0};
  ServerThread server(server_nexus, RpcConfig{.rpc_id = 1},
                      ServerHooks{.on_start = [&](Rpc& rpc) { data_port = datapath_port(rpc); }});
  Nexus client_nexus(local_nexus());
  Rpc client(client_nexus, RpcConfig{.rpc_id = 0});
  auto sn = client.create_session(server_nexus.uri(), 1);
  REQUIRE(sn);
  REQUIRE(run_until(client, [&] { return client.is_connected(*sn); }));
  REQUIRE(wait_until([&] { return server.num_active_sessions() == 1; }));

  // Given legitimate echoes streaming, while a third party blasts the
  // server's datapath and session-management ports
  EchoStream stream(client, *sn, 4);
  std::atomic<bool> stop{false};
  BlastReport report;
  std::thread blaster(blast, data_port.load(), port_of_uri(server_nexus.uri()), SessionNum{0}, *sn,
                      std::cref(stop), std::ref(report));
  const auto end = std::chrono::steady_clock::now() + 3s;
  bool ok = true;
  while (ok && std::chrono::steady_clock::now() < end) {
    client.run_event_loop_once();
    ok = stream.poll(/*restart=*/true);
  }
  stop = true;
  blaster.join();
  // Expect every legitimate request to complete with its own bytes
  REQUIRE(run_until(client, [&] {
    stream.poll(/*restart=*/false);
    return stream.idle();
  }));
  CHECK(stream.bad() == 0);
  CHECK(stream.enqueue_failures() == 0);
  CHECK(stream.completed() > 100);
  // and the session to survive, forged disconnects included
  run_for(client, 100ms);
  CHECK(client.is_connected(*sn));
  CHECK(server.num_active_sessions() == 1);
  EchoCall last;
  REQUIRE(last.prepare(client, 5000, 99));
  REQUIRE(last.enqueue(client, *sn, kEcho) == Errc::kOk);
  REQUIRE(run_until(client, [&] { return last.completions > 0; }));
  CHECK(last.echoed());
  last.release(client);

  server.stop();
  const RpcStats& s = server.final_stats();
  INFO("blaster sent " << report.datapath_sent << " datapath and " << report.sm_sent
                       << " SM datagrams; server drops: too_short " << s.drops.too_short
                       << ", bad_magic " << s.drops.bad_magic << ", bad_header "
                       << s.drops.bad_header << ", unknown_session " << s.drops.unknown_session
                       << ", wrong_source " << s.drops.wrong_source << "; " << stream.completed()
                       << " legitimate requests completed");
  CHECK(report.datapath_sent > 1000);
  // Expect the garbage to be dropped and counted by reason
  CHECK(s.drops.too_short > 0);
  CHECK(s.drops.bad_magic > 0);
  CHECK(s.drops.bad_header > 0);
  CHECK(s.drops.unknown_session > 0);
  CHECK(s.drops.wrong_source > 0);
  // and the forged session-management requests refused, none accepted
  CHECK(report.sm_accepted == 0);
  CHECK(report.sm_refusals[static_cast<size_t>(SmErr::kInvalidRoutingInfo)] > 0);
  CHECK(report.sm_refusals[static_cast<size_t>(SmErr::kUnknownRpcId)] > 0);
  CHECK(report.sm_refusals[static_cast<size_t>(SmErr::kTransportMismatch)] > 0);
  CHECK(report.sm_refusals[static_cast<size_t>(SmErr::kInvalidSession)] > 0);
  CHECK(report.sm_refusals[static_cast<size_t>(SmErr::kVersionMismatch)] > 0);
}

TEST_CASE("forged packets from the peer's own address cannot wedge or overflow a server slot") {
  // Over `fake`, where a packet can carry the client's endpoint as source
  // and so reach the slot logic.
  FakeNetwork::instance().reset();
  Nexus nexus(local_nexus());
  REQUIRE(nexus.register_handler(kEcho, echo_into_response));
  Rpc server(nexus, RpcConfig{.rpc_id = 1, .transport = "fake", .mtu_bytes = 256});
  Rpc client(nexus, RpcConfig{.rpc_id = 0, .transport = "fake", .mtu_bytes = 256});
  auto sn = client.create_session(nexus.uri(), 1);
  REQUIRE(sn);
  REQUIRE(run_all_until({&client, &server}, [&] { return client.is_connected(*sn); }));
  const uint32_t client_ep = static_cast<FakeTransport&>(impl_of(client).transport()).endpoint();
  const uint32_t server_ep = static_cast<FakeTransport&>(impl_of(server).transport()).endpoint();
  const size_t dpp = server.max_data_per_pkt();
  const RpcStats& s = server.stats();
  auto forge = [&](std::vector<uint8_t> bytes) {
    const uint64_t before = s.rx_pkts;
    FakeNetwork::instance().send(FakePacket{client_ep, server_ep, std::move(bytes)});
    REQUIRE(run_all_until({&client, &server}, [&] { return s.rx_pkts > before; }));
  };
  auto echo_ok = [&](size_t size, uint64_t seed) {
    EchoCall call;
    REQUIRE(call.prepare(client, size, seed));
    REQUIRE(call.enqueue(client, *sn, kEcho) == Errc::kOk);
    REQUIRE(run_all_until({&client, &server}, [&] { return call.completions > 0; }));
    const bool ok = call.echoed();
    call.release(client);
    return ok;
  };

  // Each session starts at its own request number (see first_req_num).
  const Session* server_session = RpcImplTestAccess::session(impl_of(server), 0);
  REQUIRE(server_session != nullptr);
  const uint64_t first = first_req_num(server_session->sm_token);
  // When a request number far ahead of what the slot expects arrives
  const DropCounters d0 = s.drops;
  forge(pkt(req_hdr(8, 0, 0, first + 8 * 1000), 8));
  // Expect it dropped, not taken as the slot's new request (which would
  // make every real request of the slot look stale)
  CHECK(s.drops.out_of_order == d0.out_of_order + 1);
  CHECK(s.handlers_run == 0);
  for (uint64_t i = 0; i < 3; i++) CHECK(echo_ok(100, i));

  // When packet 1 of a request claims a larger message than packet 0 did
  // (slot 1 expects request 1; the client has not used that slot)
  forge(pkt(req_hdr(static_cast<uint32_t>(dpp + 10), 0, 0, first + 1), dpp));
  forge(pkt(req_hdr(static_cast<uint32_t>(3 * dpp), 0, 1, first + 1), dpp));
  // Expect it dropped instead of written past the request buffer
  CHECK(s.drops.bad_header == d0.bad_header + 1);
  CHECK(s.handlers_run == 3);

  // An empty datagram is too short, like any other runt
  forge({});
  CHECK(s.drops.too_short == d0.too_short + 1);

  for (uint64_t i = 0; i < 3; i++) CHECK(echo_ok(3 * dpp, 10 + i));
  CHECK(s.handlers_run == 6);
  FakeNetwork::instance().reset();
}

TEST_CASE("a session-management message with incarnation 0 is ignored") {
  Nexus nexus(local_nexus());
  ServerThread server(nexus, RpcConfig{.rpc_id = 1});
  const uint16_t sm_port = port_of_uri(nexus.uri());
  UdpSock sock;
  std::vector<uint8_t> rx(2048);
  auto reply = [&]() -> std::optional<SmMsg> {
    const auto deadline = std::chrono::steady_clock::now() + 500ms;
    while (std::chrono::steady_clock::now() < deadline) {
      const ssize_t n = sock.recv(rx.data(), rx.size(), 50ms);
      SmMsg m;
      if (n > 0 && decode_sm_msg({rx.data(), static_cast<size_t>(n)}, m) == SmDecodeStatus::kOk &&
          m.type == SmMsgType::kConnectResp) {
        return m;
      }
    }
    return std::nullopt;
  };
  // Given a well-formed connect request stamped with incarnation 0, which
  // no Nexus sends (a remote known by it would never be declared failed)
  sock.send(sm_port, sm_bytes(connect_req(1, sock.port(), 0, /*incarnation=*/0)));
  // Expect no answer and no session
  CHECK_FALSE(reply().has_value());
  CHECK(server.num_active_sessions() == 0);
  // while the same request with an incarnation is accepted
  sock.send(sm_port, sm_bytes(connect_req(2, sock.port(), 0, 0x77)));
  const auto r = reply();
  REQUIRE(r.has_value());
  CHECK(r->err == SmErr::kNone);
  CHECK(wait_until([&] { return server.num_active_sessions() == 1; }));
}

TEST_CASE("a forged ask for credits gets at most the server's own, at least the minimum") {
  Nexus nexus(local_nexus());
  // 256 ring entries, 32 credits per session at most
  ServerThread server(nexus, RpcConfig{.rpc_id = 1, .rx_ring_size = 256, .session_credits = 32});
  const uint16_t sm_port = port_of_uri(nexus.uri());
  UdpSock sock;
  std::vector<uint8_t> rx(2048);
  auto ask = [&](uint64_t token, SessionNum client_sn, uint16_t credits) -> std::optional<SmMsg> {
    SmMsg m = connect_req(token, sock.port(), client_sn);
    m.session_credits = credits;
    sock.send(sm_port, sm_bytes(m));
    const auto deadline = std::chrono::steady_clock::now() + 500ms;
    while (std::chrono::steady_clock::now() < deadline) {
      const ssize_t n = sock.recv(rx.data(), rx.size(), 50ms);
      SmMsg r;
      if (n > 0 && decode_sm_msg({rx.data(), static_cast<size_t>(n)}, r) == SmDecodeStatus::kOk &&
          r.type == SmMsgType::kConnectResp && r.token == token) {
        return r;
      }
    }
    return std::nullopt;
  };
  // When a client asks for every credit there is
  const auto greedy = ask(1, 0, 0xffff);
  // Expect the server's own setting, and ring room left for others
  REQUIRE(greedy.has_value());
  CHECK(greedy->err == SmErr::kNone);
  CHECK(greedy->session_credits == 32);
  // When one asks for none (which would reserve nothing and stall it)
  const auto none = ask(2, 1, 0);
  // Expect the minimum (what an overcommitted client asks for)
  REQUIRE(none.has_value());
  CHECK(none->err == SmErr::kNone);
  CHECK(none->session_credits == rpc::detail::kMinSessionCredits);
  // and the ring to be counted by credits: 256 - 32 - 4 = 220 entries hold
  // six more sessions of 32 (192); the next gets the 28 left, and those
  // after it the minimum, beyond the ring (docs/design.md, "Sessions and
  // ring room")
  auto granted = [&](uint64_t token, uint16_t credits) -> size_t {
    const auto r = ask(token, static_cast<SessionNum>(token), credits);
    REQUIRE(r.has_value());
    REQUIRE(r->err == SmErr::kNone);
    return r->session_credits;
  };
  for (uint64_t i = 0; i < 6; i++) REQUIRE(granted(10 + i, 32) == 32);
  CHECK(granted(20, 32) == 28);
  CHECK(granted(21, 32) == rpc::detail::kMinSessionCredits);
  CHECK(granted(22, 8) == rpc::detail::kMinSessionCredits);
  // (the server thread publishes its count once per loop iteration)
  CHECK(wait_until([&] { return server.num_active_sessions() == 11; }));
}

TEST_CASE("a flood of connect requests never takes a server past its session limits") {
  struct Limits {
    size_t max_sessions;
    size_t rx_ring_size;
    size_t cap;  // sessions the server can hold
    SmErr refusal;
  };
  // max_sessions binds, whether the RX ring holds every session's credits
  // or only eight sessions' (the rest are admitted beyond it).
  const Limits limits = GENERATE(Limits{16, 4096, 16, SmErr::kTooManySessions},
                                 Limits{16, 8 * 32, 16, SmErr::kTooManySessions});
  CAPTURE(limits.max_sessions, limits.rx_ring_size);

  // Default failure detection: a remote silent for 1 s is declared failed.
  Nexus server_nexus(local_nexus());
  REQUIRE(server_nexus.register_handler(kEcho, echo_into_response));
  // (all of it from one host: test_budgets.cc has the per-host share)
  ServerThread server(server_nexus, RpcConfig{.rpc_id = 1,
                                              .rx_ring_size = limits.rx_ring_size,
                                              .max_sessions = limits.max_sessions,
                                              .max_sessions_per_host = limits.max_sessions});
  Nexus client_nexus(local_nexus());
  SessionEvents ev;
  Rpc client(client_nexus, RpcConfig{.rpc_id = 0, .session_callback = ev.callback()});
  auto connect = [&]() -> std::optional<SessionNum> {
    auto sn = client.create_session(server_nexus.uri(), 1);
    REQUIRE(sn);
    REQUIRE(run_until(client, [&] {
      return ev.has(*sn, SessionEvent::kConnected) || ev.has(*sn, SessionEvent::kConnectFailed);
    }));
    if (!client.is_connected(*sn)) return std::nullopt;
    return *sn;
  };
  auto echo_ok = [&](SessionNum sn, uint64_t seed) {
    EchoCall call;
    REQUIRE(call.prepare(client, 2000, seed));
    REQUIRE(call.enqueue(client, sn, kEcho) == Errc::kOk);
    REQUIRE(run_until(client, [&] { return call.completions > 0; }));
    const bool ok = call.echoed();
    call.release(client);
    return ok;
  };

  // Given two legitimate sessions
  std::vector<SessionNum> legit;
  for (int i = 0; i < 2; i++) {
    auto sn = connect();
    REQUIRE(sn);
    legit.push_back(*sn);
  }
  REQUIRE(wait_until([&] { return server.num_active_sessions() == 2; }));

  // When one socket sends 2 x 2000 connect requests with distinct tokens,
  // in batches, reading the answers
  const uint16_t sm_port = port_of_uri(server_nexus.uri());
  UdpSock flood;
  std::vector<uint8_t> rx(2048);
  size_t accepted = 0, refused = 0, other = 0, max_seen = 0;
  uint64_t token = 1;
  size_t rss_after_first = 0;
  const size_t rss_before = rss_bytes();
  for (int round = 0; round < 2; round++) {
    for (int batch = 0; batch < 40; batch++) {
      for (int i = 0; i < 50; i++, token++) {
        flood.send(sm_port, sm_bytes(connect_req(token, flood.port(),
                                                 static_cast<SessionNum>(token), 0xF100D)));
      }
      size_t answers = 0;
      const auto deadline = std::chrono::steady_clock::now() + 2s;
      while (answers < 50 && std::chrono::steady_clock::now() < deadline) {
        client.run_event_loop_once();  // the legitimate sessions keep their heartbeats
        const ssize_t n = flood.recv(rx.data(), rx.size(), 1ms);
        SmMsg m;
        if (n <= 0 ||
            decode_sm_msg({rx.data(), static_cast<size_t>(n)}, m) != SmDecodeStatus::kOk ||
            m.type != SmMsgType::kConnectResp) {
          continue;
        }
        answers++;
        if (m.err == SmErr::kNone) {
          accepted++;
        } else if (m.err == limits.refusal) {
          refused++;
        } else {
          other++;
        }
      }
      max_seen = std::max(max_seen, server.num_active_sessions());
      // The legitimate sessions are served throughout.
      if (batch % 10 == 0) {
        for (SessionNum sn : legit) CHECK(echo_ok(sn, token + sn));
      }
    }
    if (round == 0) rss_after_first = rss_bytes();
  }
  const size_t rss_after = rss_bytes();
  INFO("accepted " << accepted << ", refused " << refused << ", other " << other << "; RSS before "
                   << rss_before << ", after round 1 " << rss_after_first << ", after round 2 "
                   << rss_after);
  // Expect the server never to hold more sessions than it may
  CHECK(max_seen <= limits.cap);
  CHECK(server.num_active_sessions() <= limits.cap);
  // the forged connects to fill what was left, and all others to be refused
  // for that reason (while the flood keeps the forger alive, nothing frees)
  CHECK(accepted == limits.cap - legit.size());
  CHECK(other == 0);
  CHECK(accepted + refused == 4000);
  // memory to stay flat: refusals cost nothing, and the second 2000 no more
  // than the first
  CHECK(rss_after < rss_before + (32u << 20));
  CHECK(rss_after < rss_after_first + (4u << 20));
  // and the legitimate sessions to keep working
  for (SessionNum sn : legit) {
    CHECK(client.is_connected(sn));
    CHECK(echo_ok(sn, 1000 + sn));
  }
  // A new legitimate client is refused while the forged sessions hold the room
  ev.events.clear();
  CHECK_FALSE(connect().has_value());
  CHECK(ev.events.size() == 1);
  CHECK(std::get<2>(ev.events[0]) == limits.refusal);
  // and connects once the silent forger is declared failed and its
  // sessions are freed.
  REQUIRE(wait_until([&] { return server.num_active_sessions() == legit.size(); }, 10s));
  ev.events.clear();  // session numbers are reused
  auto late = connect();
  REQUIRE(late.has_value());
  CHECK(echo_ok(*late, 4242));
  for (SessionNum sn : legit) CHECK(client.is_connected(sn));
}
