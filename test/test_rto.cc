// The retransmission timeout (rtt.h, pkt_loss.cc): measured as TCP does,
// backed off while a peer is slower than it, and spurious retransmissions
// counted. Engine cases over `fake` in one thread; the estimator alone is
// checked with exact numbers.
#include <catch2/catch.hpp>

#include "fake_pair.h"
#include "session/rtt.h"
#include "wire/pkt_hdr.h"

using namespace rpc;
using namespace rpc::detail;
using namespace rpc::test;

TEST_CASE("the RTT estimator follows RFC 6298 and keeps to its floor", "[unit]") {
  RttEstimator rtt(1'000'000);       // 1 ms floor
  CHECK(rtt.rto_ns() == 1'000'000);  // no sample yet: the floor
  rtt.add_sample(10'000'000);
  CHECK(rtt.srtt_ns() == 10'000'000);
  CHECK(rtt.rttvar_ns() == 5'000'000);
  CHECK(rtt.rto_ns() == 30'000'000);  // srtt + 4 rttvar
  rtt.add_sample(2'000'000);
  CHECK(rtt.rttvar_ns() == (3 * 5'000'000 + 8'000'000) / 4);
  CHECK(rtt.srtt_ns() == (7 * 10'000'000 + 2'000'000) / 8);
  // Fast, steady samples pull it down to the floor, never below.
  for (int i = 0; i < 200; i++) rtt.add_sample(10'000);
  CHECK(rtt.rto_ns() == 1'000'000);
  // A huge sample is capped.
  RttEstimator slow(0);
  slow.add_sample(uint64_t{10} * RttEstimator::kMaxRtoNs);
  CHECK(slow.rto_ns() == RttEstimator::kMaxRtoNs);
}

TEST_CASE("a backed-off RTO doubles per timeout but stays within kMaxRtoNs", "[unit]") {
  RttEstimator rtt(2'000'000);  // 2 ms floor, no sample
  CHECK(rtt.backed_off_rto_ns(0) == 2'000'000);
  CHECK(rtt.backed_off_rto_ns(3) == 16'000'000);
  // A session whose RTO grew to 100 ms on a loaded machine: 200, 400, 800
  // ms, then 1 s, not 6.4 s after six timeouts
  RttEstimator loaded(2'000'000);
  loaded.add_sample(50'000'000);
  REQUIRE(loaded.rto_ns() == 150'000'000);
  CHECK(loaded.backed_off_rto_ns(2) == 600'000'000);
  CHECK(loaded.backed_off_rto_ns(3) == RttEstimator::kMaxRtoNs);
  CHECK(loaded.backed_off_rto_ns(6) == RttEstimator::kMaxRtoNs);
  // A floor above the cap is kept
  RttEstimator high(3 * RttEstimator::kMaxRtoNs);
  CHECK(high.backed_off_rto_ns(4) == 3 * RttEstimator::kMaxRtoNs);
}

TEST_CASE("a server slower than the RTO is retransmitted to at doubling intervals", "[protocol]") {
  // Given a 1 ms RTO floor and a server that answers each request after 12 ms
  Pair p(RpcConfig{.rto_us = 1000}, RpcConfig{.rto_us = 1000});
  constexpr int kRequests = 8;
  for (int i = 0; i < kRequests; i++) {
    Call call(*p.client, 32);
    REQUIRE(call.enqueue(*p.client, p.sn, kDeferForever) == Errc::kOk);
    REQUIRE(p.pump_until([&] { return g_deferred != nullptr; }));
    p.pump_for(12ms);
    ReqHandle& h = *g_deferred;
    g_deferred = nullptr;
    h.pre_resp_buffer().resize(0);
    p.server->enqueue_response(h, h.pre_resp_buffer());
    REQUIRE(p.pump_until([&] { return call.runs == 1; }));
    CHECK(call.errc == Errc::kOk);
    call.release(*p.client);
  }
  // Expect each request resent after about 1, 2, 4 and 8 ms (4 times; a
  // descheduled test thread may add one), not every millisecond (about 11
  // times with a fixed RTO).
  const uint64_t retransmissions = p.client->stats().retransmissions;
  CHECK(retransmissions >= kRequests);
  CHECK(retransmissions <= 6 * kRequests);
}

TEST_CASE("a session's RTO follows its measured round trips", "[protocol]") {
  // Given a 50 ms RTO floor and answers within microseconds (fake)
  Pair p(RpcConfig{}, RpcConfig{.rto_us = 50000});
  for (int i = 0; i < 20; i++) {  // multi-packet: their credit returns are sampled
    Call call(*p.client, 3000);
    REQUIRE(call.enqueue(*p.client, p.sn, kEcho) == Errc::kOk);
    REQUIRE(p.pump_until([&] { return call.runs == 1; }));
    CHECK(call.errc == Errc::kOk);
    call.release(*p.client);
  }
  const SessionStats* s = p.client->session_stats(p.sn);
  REQUIRE(s != nullptr);
  // Expect round trips measured (rto_us is set by the first sample), far
  // below the floor, and the RTO at the floor, never below it.
  CHECK(s->rto_us == 50000);
  CHECK(s->srtt_us < 50000);
  CHECK(p.client->stats().retransmissions == 0);
}

TEST_CASE("an answer that arrives after its packet was resent counts a spurious retransmission",
          "[protocol]") {
  // (Congestion control off: the timeout halves its rate, and the paced
  // resend could still wait in the wheel when the held answer arrives.)
  Pair p(RpcConfig{.rto_us = 2000}, RpcConfig{.rto_us = 2000, .congestion_control = false});
  // Given the server's first credit return held back (late, not lost)
  bool held_one = false;
  FakeNetwork::instance().set_filter([&](const FakePacket& pkt) {
    const PktHdr hdr = PktHdr::load(pkt.bytes.data());
    if (!held_one && hdr.pkt_type() == PktType::kExplCr) {
      held_one = true;
      return FakeVerdict::kHold;
    }
    return FakeVerdict::kDeliver;
  });
  // When a multi-packet request times out on it and resends (the server
  // credits the copy), and the held credit return then arrives
  Call call(*p.client, 12000);  // multi-packet, below the bulk threshold
  REQUIRE(call.enqueue(*p.client, p.sn, kEcho) == Errc::kOk);
  REQUIRE(p.pump_until([&] { return p.client->stats().retransmissions > 0; }));
  FakeNetwork::instance().release_held();
  REQUIRE(p.pump_until([&] { return call.runs == 1; }));
  // Expect the request to complete once and the duplicate answer counted.
  CHECK(call.errc == Errc::kOk);
  CHECK(p.client->stats().spurious_retransmissions >= 1);
  CHECK(p.client->session_stats(p.sn)->spurious_retransmissions >= 1);
  call.release(*p.client);
}
