// The bulk security model over the `fake` transport (issue 9): payloads are
// exposed to peers only for their transfer, and reads in flight are fenced,
// so a buffer never changes after the engine hands it back. The fake
// transport copies a read when it completes, like a NIC's DMA, and can hold
// reads in flight (FakeNetwork::set_hold_bulk).
#include <catch2/catch.hpp>
#include <cstring>

#include "fake_pair.h"
#include "rpc/impl_access.h"

using namespace rpc;
using namespace rpc::detail;
using namespace rpc::test;
using namespace std::chrono_literals;

namespace {

constexpr size_t kLarge = 20000;  // above the default bulk threshold (16 KiB)

bool all_bytes(const MsgBuffer& buf, size_t size, uint8_t value) {
  for (size_t i = 0; i < size; i++) {
    if (buf.data()[i] != value) return false;
  }
  return true;
}

TEST_CASE("payloads are exposed only while their transfer needs them") {
  Pair p;
  FakeNetwork& net = FakeNetwork::instance();
  // Given a bulk request answered by a bulk response
  Call call(*p.client, kLarge);
  REQUIRE(call.enqueue(*p.client, p.sn, kEcho) == Errc::kOk);
  REQUIRE(p.pump_until([&] { return call.runs > 0; }));
  REQUIRE(call.errc == Errc::kOk);
  CHECK(check_pattern(call.resp, kLarge, kLarge));
  CHECK(p.client->stats().bulk_exposures == 1);
  CHECK(p.server->stats().bulk_exposures == 1);
  // Expect: the request's exposure ended with the request; the response's
  // stays, read-only, until the client acknowledges it
  CHECK(net.num_exposures() == 1);
  // When the next request on that slot acknowledges it, or the session ends
  Call next(*p.client, 32);
  for (int i = 0; i < 8; i++) {  // one per slot of the window: slot 0 comes round
    next.runs = 0;
    REQUIRE(next.enqueue(*p.client, p.sn, kEcho) == Errc::kOk);
    REQUIRE(p.pump_until([&] { return next.runs > 0; }));
  }
  CHECK(net.num_exposures() == 0);
  call.release(*p.client);
  next.release(*p.client);
}

TEST_CASE("a session's end revokes the cached response's exposure") {
  Pair p;
  Call call(*p.client, 32, kLarge);
  REQUIRE(call.enqueue(*p.client, p.sn, kLargeResp) == Errc::kOk);
  REQUIRE(p.pump_until([&] { return call.runs > 0; }));
  REQUIRE(FakeNetwork::instance().num_exposures() == 1);
  REQUIRE(p.client->destroy_session(p.sn));
  REQUIRE(p.pump_until([&] { return p.server->num_active_sessions() == 0; }));
  CHECK(FakeNetwork::instance().num_exposures() == 0);
  call.release(*p.client);
}

TEST_CASE("a response read in flight when its request fails holds back the continuation") {
  Pair p;
  FakeNetwork& net = FakeNetwork::instance();
  // Given a bulk response whose read is in flight (held)
  net.set_hold_bulk(true);
  Call call(*p.client, 32, kLarge);
  REQUIRE(call.enqueue(*p.client, p.sn, kLargeResp) == Errc::kOk);
  REQUIRE(
      p.pump_until([&] { return RpcImplTestAccess::bulk_reads_live(impl_of(*p.client)) == 1; }));
  // When the application destroys the session
  REQUIRE(p.client->destroy_session(p.sn));
  p.pump_for(20ms);
  // Expect: the continuation waits for the read
  CHECK(call.runs == 0);
  CHECK(p.client->stats().bulk_reads_orphaned == 1);
  // When the read completes
  net.set_hold_bulk(false);
  REQUIRE(p.pump_until([&] { return call.runs > 0; }));
  // Expect: the request failed once, and its buffer is never written again
  CHECK(call.runs == 1);
  CHECK(call.errc == Errc::kSessionDestroyed);
  CHECK(call.resp.size() == 0);
  std::memset(call.resp.data(), 0xAB, kLarge);  // the application reuses it
  p.pump_for(20ms);
  CHECK(all_bytes(call.resp, kLarge, 0xAB));
  CHECK(RpcImplTestAccess::bulk_reads_live(impl_of(*p.client)) == 0);
  call.release(*p.client);
}

TEST_CASE("a request that fails while the server reads it is revoked, and its handler never runs") {
  Pair p;
  FakeNetwork& net = FakeNetwork::instance();
  // Given a bulk request whose read by the server is in flight (held)
  net.set_hold_bulk(true);
  Call call(*p.client, kLarge);
  REQUIRE(call.enqueue(*p.client, p.sn, kEcho) == Errc::kOk);
  REQUIRE(
      p.pump_until([&] { return RpcImplTestAccess::bulk_reads_live(impl_of(*p.server)) == 1; }));
  const size_t budget_held = RpcImplTestAccess::rx_budget_used(impl_of(*p.server));
  CHECK(budget_held >= kLarge);
  // When the client gives up on it (destroys the session): its continuation
  // runs at once, with the request buffer no longer exposed
  REQUIRE(p.client->destroy_session(p.sn));
  CHECK(call.runs == 1);
  CHECK(call.errc == Errc::kSessionDestroyed);
  CHECK(net.num_exposures() == 0);
  std::memset(call.req.data(), 0xCD, kLarge);  // the application reuses it
  // and the server's session ends with the read still in flight
  REQUIRE(p.pump_until([&] { return p.server->num_active_sessions() == 0; }));
  // Expect: the server keeps the read's buffer (and its budget) until the
  // read is done; the late read then fails, and no handler runs on bytes
  // the client wrote after its request failed
  CHECK(RpcImplTestAccess::bulk_reads_live(impl_of(*p.server)) == 1);
  CHECK(RpcImplTestAccess::rx_budget_used(impl_of(*p.server)) == budget_held);
  net.set_hold_bulk(false);
  REQUIRE(
      p.pump_until([&] { return RpcImplTestAccess::bulk_reads_live(impl_of(*p.server)) == 0; }));
  CHECK(p.server->stats().bulk_reads_failed == 1);
  CHECK(p.server->stats().bulk_reads_orphaned == 1);
  CHECK(p.server->stats().handlers_run == 0);
  CHECK(RpcImplTestAccess::rx_budget_used(impl_of(*p.server)) == 0);
  call.release(*p.client);
}

TEST_CASE("a request timing out mid-read completes once, after its read") {
  Pair p({}, RpcConfig{.request_timeout_ms = 50});
  FakeNetwork::instance().set_hold_bulk(true);
  Call call(*p.client, 32, kLarge);
  REQUIRE(call.enqueue(*p.client, p.sn, kLargeResp) == Errc::kOk);
  REQUIRE(
      p.pump_until([&] { return RpcImplTestAccess::bulk_reads_live(impl_of(*p.client)) == 1; }));
  p.pump_for(150ms);  // well past the timeout
  CHECK(call.runs == 0);
  CHECK(p.client->stats().requests_timed_out == 1);
  FakeNetwork::instance().set_hold_bulk(false);
  REQUIRE(p.pump_until([&] { return call.runs > 0; }));
  p.pump_for(20ms);
  CHECK(call.runs == 1);
  CHECK(call.errc == Errc::kTimedOut);
  call.release(*p.client);
}

TEST_CASE("~Rpc waits for reads in flight, then cancels them and runs their continuations once") {
  Pair p;
  FakeNetwork::instance().set_hold_bulk(true);
  Call call(*p.client, 32, kLarge);
  REQUIRE(call.enqueue(*p.client, p.sn, kLargeResp) == Errc::kOk);
  REQUIRE(
      p.pump_until([&] { return RpcImplTestAccess::bulk_reads_live(impl_of(*p.client)) == 1; }));
  // When the client Rpc goes away with the read still held (it never
  // completes): ~Rpc gives it 2 s, then makes the transport cancel it
  p.client.reset();
  // Expect: the continuation ran exactly once, with the failure
  CHECK(call.runs == 1);
  CHECK(call.errc == Errc::kSessionDestroyed);
}

TEST_CASE("a payload the transport cannot expose travels as datagrams") {
  Pair p;
  FakeNetwork::instance().set_refuse_exposures(true);
  Call call(*p.client, kLarge);
  REQUIRE(call.enqueue(*p.client, p.sn, kEcho) == Errc::kOk);
  REQUIRE(p.pump_until([&] { return call.runs > 0; }));
  CHECK(call.errc == Errc::kOk);
  CHECK(check_pattern(call.resp, kLarge, kLarge));
  CHECK(p.client->stats().bulk_expose_failed == 1);
  CHECK(p.server->stats().bulk_expose_failed == 1);
  CHECK(p.client->stats().bulk_reads == 0);
  CHECK(p.server->stats().bulk_reads == 0);
  call.release(*p.client);
}

TEST_CASE("bulk control packets that disagree with what was agreed are refused") {
  // Given control packets rewritten on the wire: a length other than the
  // header's, or nonzero reserved bits
  auto run = [](auto rewrite) {
    Pair p;
    FakeNetwork::instance().set_filter([&](const FakePacket& pkt) {
      const PktHdr h = PktHdr::load(pkt.bytes.data());
      if (h.pkt_type() == PktType::kReq && h.bulk()) {
        BulkCtrl c = BulkCtrl::load(pkt.bytes.data() + kPktHeaderBytes);
        rewrite(c);
        // The filter is handed the packet about to be delivered (a
        // non-const object): rewrite it in place.
        c.store(const_cast<uint8_t*>(pkt.bytes.data()) + kPktHeaderBytes);
      }
      return FakeVerdict::kDeliver;
    });
    Call call(*p.client, kLarge);
    REQUIRE(call.enqueue(*p.client, p.sn, kEcho) == Errc::kOk);
    p.pump_for(30ms);
    // Expect: the server reads nothing and runs no handler
    CHECK(p.server->stats().bulk_reads == 0);
    CHECK(p.server->stats().handlers_run == 0);
    CHECK(p.server->stats().drops.bad_header > 0);
    FakeNetwork::instance().set_filter(nullptr);
    p.client.reset();
  };
  SECTION("longer") {
    run([](BulkCtrl& c) { c.len += 4096; });
  }
  SECTION("shorter") {
    run([](BulkCtrl& c) { c.len -= 1; });
  }
  SECTION("reserved") {
    run([](BulkCtrl& c) { c.reserved = 1; });
  }
}

}  // namespace
