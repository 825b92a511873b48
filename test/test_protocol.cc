// Protocol tests: the engine driven over the in-process `fake` transport
// with scripted packet fates (drop, duplicate, hold/reorder), asserting on
// the captured TX headers, handler executions and counters. Client and
// server Rpcs run in this one thread, pumped alternately, so every run is
// deterministic up to the RTO.
#include <atomic>
#include <catch2/catch.hpp>
#include <memory>

#include "common/clock.h"
#include "manual_clock.h"
#include "rpc/impl_access.h"
#include "rpc/rpc_impl.h"
#include "rpc_impl_test_access.h"
#include "test_util.h"
#include "transport/fake/fake_transport.h"
#include "transport/registry.h"
#include "wire/pkt_hdr.h"

using namespace rpc;
using namespace rpc::detail;
using namespace rpc::test;

namespace {

std::atomic<int> g_handler_runs{0};

void counting_echo(ReqHandle& h) {
  g_handler_runs++;
  echo_into_response(h);
}

// Keeps the request for the test to answer later, outside the event loop.
constexpr ReqType kHeld = 9;
ReqHandle* g_held_handle = nullptr;
void hold_request(ReqHandle& h) { g_held_handle = &h; }

PktHdr hdr_of(const FakePacket& p) { return PktHdr::load(p.bytes.data()); }

uint32_t endpoint_of(Rpc& rpc) {
  return static_cast<FakeTransport&>(impl_of(rpc).transport()).endpoint();
}

// A client and a server Rpc over `fake` in one thread, with one session.
struct FakePair {
  Nexus nexus{NexusConfig{.uri = "127.0.0.1:0"}};
  std::unique_ptr<Rpc> server;
  std::unique_ptr<Rpc> client;
  SessionNum sn = kInvalidSessionNum;

  explicit FakePair(size_t mtu_bytes = 256, uint64_t rto_us = 2000,
                    size_t client_credits = RpcConfig{}.session_credits,
                    size_t server_credits = RpcConfig{}.session_credits) {
    FakeNetwork::instance().reset();
    g_handler_runs = 0;
    REQUIRE(nexus.register_handler(kEcho, counting_echo));
    REQUIRE(nexus.register_handler(kHeld, hold_request));
    // Congestion control off: these tests script credit windows and packet
    // orders exactly, which its initial window and pacing would change
    // (its own tests: test_timely.cc, test_lifecycle.cc).
    const RpcConfig base{
        .transport = "fake", .mtu_bytes = mtu_bytes, .rto_us = rto_us, .congestion_control = false};
    RpcConfig sc = base;
    sc.rpc_id = 1;
    sc.session_credits = server_credits;
    server = std::make_unique<Rpc>(nexus, sc);
    RpcConfig cc = base;
    cc.rpc_id = 0;
    cc.session_credits = client_credits;
    client = std::make_unique<Rpc>(nexus, cc);
    auto s = client->create_session(nexus.uri(), 1);
    REQUIRE(s);
    sn = *s;
    REQUIRE(pump_until([&] { return client->is_connected(sn); }));
  }
  ~FakePair() { FakeNetwork::instance().reset(); }

  void pump() {
    client->run_event_loop_once();
    server->run_event_loop_once();
  }
  bool pump_until(const std::function<bool()>& done) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!done()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      pump();
    }
    return true;
  }
  // Echo of `size` bytes; returns the outcome after checking the data.
  Outcome echo(size_t size, uint64_t seed) {
    MsgBuffer req = client->alloc_msg_buffer(size);
    MsgBuffer resp = client->alloc_msg_buffer(size);
    fill_pattern(req, seed);
    Outcome out;
    REQUIRE(client->enqueue_request(sn, kEcho, req, resp, record_outcome, &out) == Errc::kOk);
    REQUIRE(pump_until([&] { return out.done; }));
    if (out.errc == Errc::kOk) CHECK(check_pattern(resp, size, seed));
    client->free_msg_buffer(req);
    client->free_msg_buffer(resp);
    return out;
  }
  size_t dpp() const { return client->max_data_per_pkt(); }
};

// The first request and response of a session that has ended since.
struct EndedSession {
  FakePacket req;
  FakePacket resp;
  SmMsg disconnect;  // the disconnect request the client sent for it
  NetAddr client_nexus;
};

// The disconnect request the client sends to end `client_sn`.
SmMsg disconnect_req_for(Rpc& client, SessionNum client_sn) {
  const Session* s = RpcImplTestAccess::session(impl_of(client), client_sn);
  REQUIRE(s != nullptr);
  SmMsg m;
  m.type = SmMsgType::kDisconnectReq;
  m.transport = rpc::detail::transport_wire_id("fake");
  m.client_rpc_id = client.rpc_id();
  m.server_rpc_id = s->remote_rpc_id;
  m.client_session_num = client_sn;
  m.server_session_num = s->remote_num;
  m.token = s->sm_token;
  return m;
}

// One echo on f's session, captured; then the session ends and a new one
// takes its place, reusing the session numbers at both ends (the freed
// numbers are reused first). Afterwards f.sn is the new session.
EndedSession end_and_reconnect(FakePair& f) {
  FakeNetwork::instance().set_capture(true);
  CHECK(f.echo(32, 21).errc == Errc::kOk);
  FakeNetwork::instance().set_capture(false);
  const auto pkts = FakeNetwork::instance().captured();
  FakeNetwork::instance().clear_captured();
  REQUIRE(pkts.size() == 2);
  const Session* server_end = RpcImplTestAccess::session(impl_of(*f.server), 0);
  REQUIRE(server_end != nullptr);
  EndedSession old{pkts[0], pkts[1], disconnect_req_for(*f.client, f.sn), server_end->remote_nexus};
  REQUIRE(hdr_of(old.req).pkt_type() == PktType::kReq);
  REQUIRE(hdr_of(old.resp).pkt_type() == PktType::kResp);

  const SessionNum old_sn = f.sn;
  REQUIRE(f.client->destroy_session(f.sn));
  REQUIRE(f.pump_until([&] {
    return f.client->num_active_sessions() == 0 && f.server->num_active_sessions() == 0;
  }));
  auto s = f.client->create_session(f.nexus.uri(), 1);
  REQUIRE(s);
  f.sn = *s;
  REQUIRE(f.pump_until([&] { return f.client->is_connected(f.sn); }));
  // The new session has the old one's numbers at both ends.
  REQUIRE(f.sn == old_sn);
  server_end = RpcImplTestAccess::session(impl_of(*f.server), 0);
  REQUIRE(server_end != nullptr);
  REQUIRE(server_end->remote_num == f.sn);
  REQUIRE(hdr_of(old.req).dest_session_num() == 0);
  return old;
}

size_t count_type(const std::vector<FakePacket>& pkts, PktType type) {
  size_t n = 0;
  for (const auto& p : pkts) n += hdr_of(p).pkt_type() == type ? 1 : 0;
  return n;
}

}  // namespace

TEST_CASE("a single-packet request gets a single response packet and nothing else") {
  FakePair f;
  FakeNetwork::instance().set_capture(true);
  // Given a connected session, When one small request is sent
  CHECK(f.echo(32, 1).errc == Errc::kOk);
  // Expect exactly one request and one response on the wire
  const auto pkts = FakeNetwork::instance().captured();
  REQUIRE(pkts.size() == 2);
  CHECK(hdr_of(pkts[0]).pkt_type() == PktType::kReq);
  CHECK(hdr_of(pkts[0]).msg_size() == 32);
  CHECK(hdr_of(pkts[1]).pkt_type() == PktType::kResp);
  CHECK(hdr_of(pkts[1]).req_num() == hdr_of(pkts[0]).req_num());
  CHECK(g_handler_runs == 1);
}

// Sent at the end of the next loop iteration instead, a packet waited for
// that iteration's receive poll first: on udp a system call, 1.2 us of a
// 10 us round trip here (docs/benchmarks.md).
TEST_CASE(
    "the first request or response enqueued outside the event loop is sent before the call "
    "returns") {
  FakePair f;
  g_held_handle = nullptr;
  FakeNetwork::instance().set_capture(true);
  MsgBuffer req = f.client->alloc_msg_buffer(32);
  MsgBuffer resp = f.client->alloc_msg_buffer(32);
  fill_pattern(req, 5);
  Outcome out;
  // Given a connected session, When a request is enqueued from outside the loop
  REQUIRE(f.client->enqueue_request(f.sn, kHeld, req, resp, record_outcome, &out) == Errc::kOk);
  // Expect its packet on the wire before either Rpc ran its loop again
  auto pkts = FakeNetwork::instance().captured();
  REQUIRE(pkts.size() == 1);
  CHECK(hdr_of(pkts[0]).pkt_type() == PktType::kReq);
  // When a second one follows before the loop runs, Expect it to wait for
  // the loop's batch (a burst from outside still leaves in one call)
  MsgBuffer req2 = f.client->alloc_msg_buffer(32);
  MsgBuffer resp2 = f.client->alloc_msg_buffer(32);
  Outcome out2;
  REQUIRE(f.client->enqueue_request(f.sn, kEcho, req2, resp2, record_outcome, &out2) == Errc::kOk);
  CHECK(FakeNetwork::instance().captured().size() == 1);
  f.client->run_event_loop_once();
  CHECK(FakeNetwork::instance().captured().size() == 2);
  // When the server's handler keeps the request and the app answers later, outside the loop
  REQUIRE(f.pump_until([&] { return g_held_handle != nullptr && out2.done; }));
  FakeNetwork::instance().clear_captured();
  MsgBuffer& pre = g_held_handle->pre_resp_buffer();
  pre.resize(0);
  f.server->enqueue_response(*g_held_handle, pre);
  // Expect the response on the wire at once, too
  pkts = FakeNetwork::instance().captured();
  REQUIRE(pkts.size() == 1);
  CHECK(hdr_of(pkts[0]).pkt_type() == PktType::kResp);
  REQUIRE(f.pump_until([&] { return out.done; }));
  CHECK(out.errc == Errc::kOk);
  CHECK(out2.errc == Errc::kOk);
  f.client->free_msg_buffer(req);
  f.client->free_msg_buffer(resp);
  f.client->free_msg_buffer(req2);
  f.client->free_msg_buffer(resp2);
}

TEST_CASE("multi-packet messages use credit returns for the request and RFRs for the response") {
  FakePair f;
  FakeNetwork::instance().set_capture(true);
  // Given a request and response of 3 packets each
  const size_t size = f.dpp() * 2 + 10;
  CHECK(f.echo(size, 2).errc == Errc::kOk);
  // Expect 3 request packets, one credit return answering the first two
  // (they arrive in one burst: the return is cumulative), 3 response
  // packets, 2 RFRs
  const auto pkts = FakeNetwork::instance().captured();
  CHECK(count_type(pkts, PktType::kReq) == 3);
  CHECK(count_type(pkts, PktType::kExplCr) == 1);
  for (const auto& p : pkts) {
    if (hdr_of(p).pkt_type() == PktType::kExplCr) CHECK(hdr_of(p).pkt_num() == 1);
  }
  CHECK(f.server->stats().credit_returns_coalesced == 1);
  CHECK(count_type(pkts, PktType::kResp) == 3);
  CHECK(count_type(pkts, PktType::kRfr) == 2);
  // and the response packets come in order 0, 1, 2
  std::vector<uint16_t> resp_pkt_nums;
  for (const auto& p : pkts) {
    if (hdr_of(p).pkt_type() == PktType::kResp) resp_pkt_nums.push_back(hdr_of(p).pkt_num());
  }
  CHECK(resp_pkt_nums == std::vector<uint16_t>{0, 1, 2});
  CHECK(f.client->stats().retransmissions == 0);
}

// A 60-packet echo (below the bulk threshold) started with the server's
// credit returns held back: the client stops once its credits run out.
struct HeldCreditEcho {
  MsgBuffer req;
  MsgBuffer resp;
  Outcome out;

  HeldCreditEcho(FakePair& f, uint64_t seed) {
    // The time stands still from here on: while the credit returns are
    // held no RTO may fire, however slow the machine (under TSan one did,
    // and the client resent all it had sent).
    use_manual_clock(impl_of(*f.client));
    use_manual_clock(impl_of(*f.server), /*start_now=*/false);
    const uint32_t server_ep = endpoint_of(*f.server);
    FakeNetwork::instance().set_capture(true);
    FakeNetwork::instance().set_filter([server_ep](const FakePacket& p) {
      return p.src == server_ep && hdr_of(p).pkt_type() == PktType::kExplCr ? FakeVerdict::kHold
                                                                            : FakeVerdict::kDeliver;
    });
    req = f.client->alloc_msg_buffer(f.dpp() * 60);
    resp = f.client->alloc_msg_buffer(f.dpp() * 60);
    fill_pattern(req, seed);
    REQUIRE(f.client->enqueue_request(f.sn, kEcho, req, resp, record_outcome, &out) == Errc::kOk);
    for (int i = 0; i < 10; i++) f.pump();
  }
};

TEST_CASE("a credit return answers every request packet up to its own, never past those sent") {
  FakePair f(256, 2000, 32, 32);
  const uint32_t server_ep = endpoint_of(*f.server);
  // Given a request stopped by held credit returns, 32 packets in flight
  HeldCreditEcho echo(f, 9);
  const Session* s = RpcImplTestAccess::session(impl_of(*f.client), f.sn);
  REQUIRE(s->credits == 0);
  const ClientSlot& slot = s->cslots[0];
  REQUIRE(slot.active);
  // When a forged return names a packet not yet sent
  FakeNetwork::instance().set_filter(nullptr);
  const uint64_t out_of_order = f.client->stats().drops.out_of_order;
  FakePacket forged;
  forged.src = server_ep;
  forged.dst = endpoint_of(*f.client);
  forged.bytes.resize(kPktHeaderBytes);
  PktHdr::make(PktType::kExplCr, kEcho, 0, f.sn, 40, slot.req_num).store(forged.bytes.data());
  FakeNetwork::instance().send(forged);
  f.client->run_event_loop_once();
  // Expect it dropped, nothing acknowledged
  CHECK(f.client->stats().drops.out_of_order == out_of_order + 1);
  CHECK(s->credits == 0);
  CHECK(slot.num_rx == 0);
  // When one return for packet 9 arrives
  PktHdr::make(PktType::kExplCr, kEcho, 0, f.sn, 9, slot.req_num).store(forged.bytes.data());
  FakeNetwork::instance().send(forged);
  f.client->run_event_loop_once();
  // Expect packets 0..9 answered: ten credits back, spent at once on packets 32..41
  CHECK(slot.num_rx == 10);
  CHECK(slot.num_tx == 42);
  // and the echo to complete once the held returns flow (late ones are
  // second answers, harmless)
  FakeNetwork::instance().release_held();
  REQUIRE(f.pump_until([&] { return echo.out.done; }));
  CHECK(echo.out.errc == Errc::kOk);
  CHECK(check_pattern(echo.resp, f.dpp() * 60, 9));
  CHECK(s->credits == s->max_credits);
}

TEST_CASE("a duplicate request is answered from the cached response") {
  FakePair f;
  const uint32_t client_ep = endpoint_of(*f.client);
  bool duplicated = false;
  // Given the network delivers the first request packet twice
  FakeNetwork::instance().set_filter([&](const FakePacket& p) {
    if (p.src == client_ep && hdr_of(p).pkt_type() == PktType::kReq && !duplicated) {
      duplicated = true;
      return FakeVerdict::kDuplicate;
    }
    return FakeVerdict::kDeliver;
  });
  // Expect the request to complete once, the handler to run once, and the
  // duplicate to be answered from the cache (its extra response is stale)
  CHECK(f.echo(32, 3).errc == Errc::kOk);
  f.pump();
  f.pump();
  CHECK(duplicated);
  CHECK(g_handler_runs == 1);
  CHECK(f.server->stats().duplicate_requests == 1);
  CHECK(f.client->stats().drops.stale == 1);
  CHECK(f.client->stats().requests_completed == 1);
}

namespace {
// Drops the server's first response packet, counting it in `dropped`.
void drop_first_response(FakePair& f, int& dropped) {
  const uint32_t server_ep = endpoint_of(*f.server);
  FakeNetwork::instance().set_filter([server_ep, &dropped](const FakePacket& p) {
    if (p.src == server_ep && hdr_of(p).pkt_type() == PktType::kResp && dropped == 0) {
      dropped++;
      return FakeVerdict::kDrop;
    }
    return FakeVerdict::kDeliver;
  });
}
}  // namespace

TEST_CASE("a lost response is resent from the cache after the RTO and the handler runs once") {
  FakePair f;
  int responses_dropped = 0;
  // Given the first response packet is lost
  drop_first_response(f, responses_dropped);
  // Expect the client to retransmit once and the server to answer from cache
  CHECK(f.echo(100, 4).errc == Errc::kOk);
  CHECK(responses_dropped == 1);
  CHECK(f.client->stats().retransmissions == 1);
  CHECK(f.server->stats().duplicate_requests == 1);
  CHECK(g_handler_runs == 1);
}

TEST_CASE("with a manual clock, a lost response is resent when the RTO has passed, not before") {
  FakePair f(256, /*rto_us=*/2000);
  use_manual_clock(impl_of(*f.client));
  use_manual_clock(impl_of(*f.server), /*start_now=*/false);
  int responses_dropped = 0;
  // Given the first response packet is lost
  drop_first_response(f, responses_dropped);
  MsgBuffer req = f.client->alloc_msg_buffer(100);
  MsgBuffer resp = f.client->alloc_msg_buffer(100);
  fill_pattern(req, 5);
  Outcome out;
  REQUIRE(f.client->enqueue_request(f.sn, kEcho, req, resp, record_outcome, &out) == Errc::kOk);
  // However long the loop runs while the time stands still, nothing is resent
  for (int i = 0; i < 1000; i++) f.pump();
  CHECK(responses_dropped == 1);
  CHECK_FALSE(out.done);
  CHECK(f.client->stats().retransmissions == 0);
  // Nor just before the RTO (2 ms, the floor: no RTT sample yet)
  g_manual_ns += 1'900'000;
  for (int i = 0; i < 10; i++) f.pump();
  CHECK(f.client->stats().retransmissions == 0);
  // Within half an RTO after it (the loss scan runs every RTO / 2), the
  // request is resent once and answered from the cache
  g_manual_ns += 200'000;
  for (int i = 0; i < 10; i++) f.pump();
  CHECK(f.client->stats().retransmissions <= 1);
  g_manual_ns += 1'000'000;
  for (int i = 0; i < 10 && !out.done; i++) f.pump();
  CHECK(out.done);
  CHECK(out.errc == Errc::kOk);
  CHECK(check_pattern(resp, 100, 5));
  CHECK(f.client->stats().retransmissions == 1);
  CHECK(f.server->stats().duplicate_requests == 1);
  CHECK(g_handler_runs == 1);
  f.client->free_msg_buffer(req);
  f.client->free_msg_buffer(resp);
}

TEST_CASE("a lost request packet is resent go-back-N and the message arrives intact") {
  FakePair f;
  const uint32_t client_ep = endpoint_of(*f.client);
  bool dropped = false;
  // Given packet 1 of a 5-packet request is lost once
  FakeNetwork::instance().set_filter([&](const FakePacket& p) {
    const PktHdr h = hdr_of(p);
    if (p.src == client_ep && h.pkt_type() == PktType::kReq && h.pkt_num() == 1 && !dropped) {
      dropped = true;
      return FakeVerdict::kDrop;
    }
    return FakeVerdict::kDeliver;
  });
  // Expect packets 2..4 to be dropped as out of order, then resent
  CHECK(f.echo(f.dpp() * 4 + 1, 5).errc == Errc::kOk);
  CHECK(dropped);
  CHECK(f.server->stats().drops.out_of_order == 3);
  CHECK(f.client->stats().retransmissions == 1);
  CHECK(g_handler_runs == 1);
}

TEST_CASE("reordered request packets are recovered and the handler runs once") {
  FakePair f;
  const uint32_t client_ep = endpoint_of(*f.client);
  bool held = false;
  // Given packet 0 of a 3-packet request is held back and delivered after
  // the others
  FakeNetwork::instance().set_filter([&](const FakePacket& p) {
    const PktHdr h = hdr_of(p);
    if (p.src == client_ep && h.pkt_type() == PktType::kReq && h.pkt_num() == 0 && !held) {
      held = true;
      return FakeVerdict::kHold;
    }
    return FakeVerdict::kDeliver;
  });
  MsgBuffer req = f.client->alloc_msg_buffer(f.dpp() * 3);
  MsgBuffer resp = f.client->alloc_msg_buffer(f.dpp() * 3);
  fill_pattern(req, 6);
  Outcome out;
  REQUIRE(f.client->enqueue_request(f.sn, kEcho, req, resp, record_outcome, &out) == Errc::kOk);
  f.pump();
  f.pump();
  REQUIRE(FakeNetwork::instance().num_held() == 1);
  FakeNetwork::instance().release_held();
  // Expect completion with the right bytes after the go-back-N resend
  REQUIRE(f.pump_until([&] { return out.done; }));
  CHECK(out.errc == Errc::kOk);
  CHECK(check_pattern(resp, f.dpp() * 3, 6));
  CHECK(f.server->stats().drops.out_of_order >= 2);
  CHECK(g_handler_runs == 1);
}

TEST_CASE("credits bound the packets a client has in flight on a session") {
  // Given a client and a server that ask for these credits
  struct Case {
    size_t client, server, agreed;
  };
  const Case c = GENERATE(Case{32, 32, 32}, Case{128, 48, 48}, Case{16, 128, 16}, Case{8, 8, 8});
  CAPTURE(c.client, c.server);
  FakePair f(256, 2000, c.client, c.server);
  // Expect both ends of the session to hold the smaller
  CHECK(RpcImplTestAccess::session(impl_of(*f.client), f.sn)->max_credits == c.agreed);
  CHECK(RpcImplTestAccess::session(impl_of(*f.server), 0)->max_credits == c.agreed);
  const size_t credits = c.agreed;
  // Given a 60-packet echo with the server's credit returns held
  HeldCreditEcho echo(f, 7);
  // Expect exactly the agreed credits' worth of request packets sent, and
  // their credit returns folded into few (one per server burst)
  CHECK(count_type(FakeNetwork::instance().captured(), PktType::kReq) == credits);
  CHECK(FakeNetwork::instance().num_held() >= 1);
  CHECK(FakeNetwork::instance().num_held() < credits);
  CHECK(f.server->stats().credit_returns_coalesced == credits - FakeNetwork::instance().num_held());
  // and everything to complete once credits flow again
  FakeNetwork::instance().set_filter(nullptr);
  FakeNetwork::instance().release_held();
  REQUIRE(f.pump_until([&] { return echo.out.done; }));
  CHECK(echo.out.errc == Errc::kOk);
  CHECK(check_pattern(echo.resp, f.dpp() * 60, 7));
}

TEST_CASE("large messages travel as one control packet and a one-sided read") {
  FakePair f;
  FakeNetwork::instance().set_capture(true);
  // Given a 1 MiB echo over a transport with bulk operations
  CHECK(f.echo(size_t{1} << 20, 8).errc == Errc::kOk);
  // Expect one bulk request packet and one bulk response packet
  const auto pkts = FakeNetwork::instance().captured();
  REQUIRE(pkts.size() == 2);
  CHECK(hdr_of(pkts[0]).pkt_type() == PktType::kReq);
  CHECK(hdr_of(pkts[0]).bulk());
  CHECK(hdr_of(pkts[0]).msg_size() == (1u << 20));
  CHECK(hdr_of(pkts[1]).pkt_type() == PktType::kResp);
  CHECK(hdr_of(pkts[1]).bulk());
  CHECK(f.server->stats().bulk_reads == 1);
  CHECK(f.client->stats().bulk_reads == 1);
}

TEST_CASE("a lost bulk response control packet is recovered by the RTO") {
  FakePair f;
  const uint32_t server_ep = endpoint_of(*f.server);
  bool dropped = false;
  FakeNetwork::instance().set_filter([&](const FakePacket& p) {
    if (p.src == server_ep && hdr_of(p).pkt_type() == PktType::kResp && !dropped) {
      dropped = true;
      return FakeVerdict::kDrop;
    }
    return FakeVerdict::kDeliver;
  });
  CHECK(f.echo(size_t{256} << 10, 9).errc == Errc::kOk);
  CHECK(dropped);
  CHECK(g_handler_runs == 1);
  CHECK(f.client->stats().retransmissions == 1);
}

TEST_CASE("malformed packets are dropped and counted by reason") {
  FakePair f;
  FakeTransport intruder(RpcConfig{.transport = "fake", .mtu_bytes = 256});
  RoutingInfo to_server;
  impl_of(*f.server).transport().fill_local_routing_info(to_server);
  auto send_raw = [&](const std::vector<uint8_t>& bytes) {
    const uint8_t* data = bytes.size() > kPktHeaderBytes ? bytes.data() + kPktHeaderBytes : nullptr;
    std::vector<uint8_t> hdr(kPktHeaderBytes, 0);
    std::copy_n(bytes.begin(), std::min(bytes.size(), kPktHeaderBytes), hdr.begin());
    const TxItem item{
        &to_server, hdr.data(), data,
        static_cast<uint32_t>(bytes.size() > kPktHeaderBytes ? bytes.size() - kPktHeaderBytes : 0),
        0};
    intruder.tx_burst({&item, 1});
    f.pump();
  };
  auto hdr_bytes = [](const PktHdr& h, size_t data_len) {
    std::vector<uint8_t> b(kPktHeaderBytes + data_len, 0xAB);
    h.store(b.data());
    return b;
  };
  const RpcStats& s = f.server->stats();
  // Given packets a peer could forge, Expect each to be dropped and counted
  PktHdr bad_magic = PktHdr::make(PktType::kReq, kEcho, 4, 0, 0, 0);
  bad_magic.w1 &= ~(uint64_t{0xF} << 44);
  send_raw(hdr_bytes(bad_magic, 4));
  CHECK(s.drops.bad_magic == 1);
  // pkt_num beyond the message
  send_raw(hdr_bytes(PktHdr::make(PktType::kReq, kEcho, 4, 0, 3, 0), 4));
  CHECK(s.drops.bad_header == 1);
  // msg_size larger than the data carried
  send_raw(hdr_bytes(PktHdr::make(PktType::kReq, kEcho, 100, 0, 0, 0), 4));
  CHECK(s.drops.bad_header == 2);
  // unknown session
  send_raw(hdr_bytes(PktHdr::make(PktType::kReq, kEcho, 4, 77, 0, 0), 4));
  CHECK(s.drops.unknown_session == 1);
  // the right session, the wrong sender
  send_raw(hdr_bytes(PktHdr::make(PktType::kReq, kEcho, 4, 0, 0, 0), 4));
  CHECK(s.drops.wrong_source == 1);
  CHECK(g_handler_runs == 0);
  // And legitimate traffic is unaffected
  CHECK(f.echo(64, 10).errc == Errc::kOk);
  CHECK(g_handler_runs == 1);
}

TEST_CASE("an old request number is dropped as stale") {
  FakePair f;
  const uint32_t client_ep = endpoint_of(*f.client);
  std::vector<FakePacket> first_requests;
  FakeNetwork::instance().set_filter([&](const FakePacket& p) {
    if (p.src == client_ep && hdr_of(p).pkt_type() == PktType::kReq) first_requests.push_back(p);
    return FakeVerdict::kDeliver;
  });
  // Given slot 0 has served requests 0 and 8
  for (int i = 0; i < 9; i++) CHECK(f.echo(16, 11).errc == Errc::kOk);
  FakeNetwork::instance().set_filter(nullptr);
  REQUIRE(first_requests.size() == 9);
  // When request 0 of slot 0 is replayed
  FakeNetwork::instance().send(first_requests[0]);
  f.pump();
  // Expect it to be dropped without running the handler
  CHECK(g_handler_runs == 9);
  CHECK(f.server->stats().drops.stale == 1);
}

TEST_CASE("a request enqueued after a long pause outside the event loop is not retransmitted") {
  FakePair f(256, /*rto_us=*/2000);
  // Given the app stayed away from the event loop for several RTOs
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  // Expect the new request not to look lost at once
  CHECK(f.echo(32, 12).errc == Errc::kOk);
  CHECK(f.client->stats().retransmissions == 0);
  CHECK(f.server->stats().duplicate_requests == 0);
}

TEST_CASE("a client away longer than the RTO does not resend requests whose answers are queued") {
  // An RTO of 20 ms: the server answers only when this thread runs it, so
  // the RTO must outlast enqueueing the 40 requests (about 5 ms under ASan
  // on a loaded machine; with a 2 ms RTO the client's first loop rightly
  // took its oldest request for lost once in about 15 runs).
  FakePair f(256, /*rto_us=*/20000);
  // Given 5 sessions with 8 requests each: 40 responses, more than one RX burst
  std::vector<SessionNum> sessions{f.sn};
  for (int i = 0; i < 4; i++) {
    auto s = f.client->create_session(f.nexus.uri(), 1);
    REQUIRE(s);
    sessions.push_back(*s);
  }
  REQUIRE(f.pump_until([&] {
    for (SessionNum s : sessions) {
      if (!f.client->is_connected(s)) return false;
    }
    return true;
  }));
  // The Rpc keeps the addresses of the buffer handles: no reallocation.
  std::vector<MsgBuffer> bufs;
  bufs.reserve(80);
  std::vector<Outcome> outs(40);
  for (size_t i = 0; i < 40; i++) {
    bufs.push_back(f.client->alloc_msg_buffer(16));
    bufs.push_back(f.client->alloc_msg_buffer(16));
    REQUIRE(f.client->enqueue_request(sessions[i / 8], kEcho, bufs[2 * i], bufs[2 * i + 1],
                                      record_outcome, &outs[i]) == Errc::kOk);
  }
  f.client->run_event_loop_once();
  for (int i = 0; i < 5; i++) f.server->run_event_loop_once();
  // When the client comes back after several RTOs with every answer queued
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  REQUIRE(f.pump_until([&] {
    return std::all_of(outs.begin(), outs.end(), [](const Outcome& o) { return o.done; });
  }));
  // Expect no slot to have been rolled back
  CHECK(f.client->stats().retransmissions == 0);
  CHECK(f.server->stats().duplicate_requests == 0);
  for (auto& b : bufs) f.client->free_msg_buffer(b);
}

TEST_CASE("a server session that reuses a session number ignores late requests of the old one") {
  FakePair f;
  const EndedSession old = end_and_reconnect(f);
  // When a request of the ended session arrives late (a retransmission from
  // before the client noticed the end, still in flight)
  FakeNetwork::instance().send(old.req);
  f.pump();
  // Expect the new session not to take it as its own request
  CHECK(g_handler_runs == 1);
  CHECK(f.server->stats().drops.out_of_order == 1);
  // and the new session's first request to get its own answer, not the
  // answer to the old request (same size, other bytes)
  CHECK(f.echo(32, 22).errc == Errc::kOk);
  CHECK(g_handler_runs == 2);
  CHECK(f.server->stats().duplicate_requests == 0);
}

TEST_CASE("a client session that reuses a session number ignores late responses of the old one") {
  FakePair f;
  const EndedSession old = end_and_reconnect(f);
  const uint32_t server_ep = endpoint_of(*f.server);
  // Given the new session's first request is outstanding (its answer held)
  bool held = false;
  FakeNetwork::instance().set_filter([&](const FakePacket& p) {
    if (p.src != server_ep || held) return FakeVerdict::kDeliver;
    held = true;
    return FakeVerdict::kHold;
  });
  MsgBuffer req = f.client->alloc_msg_buffer(32);
  MsgBuffer resp = f.client->alloc_msg_buffer(32);
  fill_pattern(req, 23);
  Outcome out;
  REQUIRE(f.client->enqueue_request(f.sn, kEcho, req, resp, record_outcome, &out) == Errc::kOk);
  REQUIRE(f.pump_until([] { return FakeNetwork::instance().num_held() == 1; }));
  // When a response of the ended session arrives late
  FakeNetwork::instance().send(old.resp);
  f.client->run_event_loop_once();
  // Expect it dropped, not taken as the answer to the new request
  CHECK_FALSE(out.done);
  CHECK(f.client->stats().drops.stale == 1);
  // and the real answer to complete the request with the right bytes
  FakeNetwork::instance().set_filter(nullptr);
  FakeNetwork::instance().release_held();
  REQUIRE(f.pump_until([&] { return out.done; }));
  CHECK(out.errc == Errc::kOk);
  CHECK(check_pattern(resp, 32, 23));
  f.client->free_msg_buffer(req);
  f.client->free_msg_buffer(resp);
}

TEST_CASE("request numbers compare as 44-bit serial numbers across the wrap") {
  constexpr uint64_t kTop = kReqNumMask;  // the last number before the wrap
  CHECK(req_num_diff(5, 3) == 2);
  CHECK(req_num_diff(3, 5) == -2);
  CHECK(req_num_diff(0, kTop) == 1);
  CHECK(req_num_diff(kTop, 0) == -1);
  CHECK(req_num_diff(7, kTop - 8) == 16);
  CHECK(req_num_diff(kSessionReqWindow - 1, kTop) == static_cast<int64_t>(kSessionReqWindow));
}

TEST_CASE("a session whose request numbers wrap keeps working") {
  FakePair f;
  // Given the session's slots are just below the top of the request-number
  // space at both ends (where a session may start, as the first number is
  // random)
  Session* client_end = RpcImplTestAccess::session(impl_of(*f.client), f.sn);
  Session* server_end = RpcImplTestAccess::session(impl_of(*f.server), client_end->remote_num);
  REQUIRE(client_end != nullptr);
  REQUIRE(server_end != nullptr);
  const uint64_t first = (kReqNumMask + 1) - 2 * kSessionReqWindow;
  RpcImplTestAccess::alloc_server_slots(impl_of(*f.server), *server_end);
  for (size_t i = 0; i < kSessionReqWindow; i++) {
    if (client_end->cslots.has(i)) client_end->cslots[i].next_req_num = first + i;
    server_end->sslots[i].req_num = first + i;
  }
  // When slot 0 serves more requests than fit below the wrap
  for (uint64_t i = 0; i < 5; i++) CHECK(f.echo(48, 30 + i).errc == Errc::kOk);
  // Expect every one to run once and be answered, none taken for stale
  CHECK(g_handler_runs == 5);
  CHECK(f.server->stats().drops.stale == 0);
  CHECK(client_end->cslots[0].next_req_num == ((first + 5 * kSessionReqWindow) & kReqNumMask));
}

TEST_CASE("a disconnect is obeyed only with the token of the connect that made the session") {
  FakePair f;
  const Session* server_end = RpcImplTestAccess::session(impl_of(*f.server), 0);
  REQUIRE(server_end != nullptr);
  const NetAddr client_nexus = server_end->remote_nexus;
  SmMsg m = disconnect_req_for(*f.client, f.sn);
  // When a disconnect with the right numbers and sender but another token
  // reaches the server
  m.token ^= 1;
  RpcImplTestAccess::deliver_sm(impl_of(*f.server), m, client_nexus);
  // Expect it refused and the session kept
  CHECK(f.server->stats().sm_refused == 1);
  CHECK(f.server->num_active_sessions() == 1);
  CHECK(f.echo(32, 40).errc == Errc::kOk);
  // and the right token to end it
  m.token ^= 1;
  RpcImplTestAccess::deliver_sm(impl_of(*f.server), m, client_nexus);
  CHECK(f.server->num_active_sessions() == 0);
}

TEST_CASE(
    "a late disconnect of an ended session does not end the session that reuses its numbers") {
  FakePair f;
  const EndedSession old = end_and_reconnect(f);
  // When the old session's disconnect arrives again (a retransmission)
  RpcImplTestAccess::deliver_sm(impl_of(*f.server), old.disconnect, old.client_nexus);
  // Expect the new session, which has the same numbers at both ends, kept
  CHECK(f.server->num_active_sessions() == 1);
  CHECK(f.echo(32, 41).errc == Errc::kOk);
}
