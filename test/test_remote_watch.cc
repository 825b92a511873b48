// Failure detection of remote Nexuses (nexus/remote_watch.h) on a manual
// clock: heartbeats, the failure timeout and incarnation probes tested
// without sleeping.
#include <catch2/catch.hpp>
#include <chrono>
#include <utility>
#include <vector>

#include "nexus/remote_watch.h"
#include "nexus/sm_thread.h"

using namespace rpc::detail;
using namespace std::chrono_literals;

namespace {

// The watch's clock: only the test moves it.
RemoteWatch::Clock::time_point g_now{};
RemoteWatch::Clock::time_point manual_now() { return g_now; }

struct Watch {
  SmThreadStats stats;
  std::vector<std::pair<SmMsg, NetAddr>> sent;
  std::vector<std::pair<NetAddr, uint64_t>> failed;
  RemoteWatch watch{
      stats, [this](const SmMsg& m, const NetAddr& to) { sent.emplace_back(m, to); },
      [this](const NetAddr& a, uint64_t inc) { failed.emplace_back(a, inc); },
      RemoteWatch::Timing{.probe_retry = 20ms, .probe_timeout = 100ms, .failure_timeout = 1000ms},
      &manual_now};

  Watch() { g_now = RemoteWatch::Clock::time_point{} + 1h; }
  size_t sent_of(SmMsgType type) const {
    size_t n = 0;
    for (const auto& [m, to] : sent) n += m.type == type ? 1 : 0;
    return n;
  }
};

const NetAddr kPeer{0x0A000001, 31850};
const NetAddr kOther{0x0A000002, 31850};

}  // namespace

TEST_CASE("a silent remote is declared failed once the failure timeout has passed, not before") {
  Watch w;
  // Given a remote whose incarnation is known (a server learns it from the
  // connect request)
  w.watch.add(kPeer, 7);
  // When it stays silent up to the failure timeout
  g_now += 1000ms;
  w.watch.on_heartbeat_tick();
  // Expect it heartbeated, not failed
  CHECK(w.failed.empty());
  CHECK(w.sent_of(SmMsgType::kHeartbeat) == 1);
  CHECK(w.sent.back().second == kPeer);
  // When it stays silent beyond it
  g_now += 1ms;
  w.watch.on_heartbeat_tick();
  // Expect it failed, with the incarnation that failed, once
  REQUIRE(w.failed.size() == 1);
  CHECK(w.failed[0] == std::pair{kPeer, uint64_t{7}});
  CHECK(w.stats.remote_failures == 1);
  g_now += 10s;
  w.watch.on_heartbeat_tick();
  CHECK(w.failed.size() == 1);
}

TEST_CASE("a remote heard from within the failure timeout never fails") {
  Watch w;
  w.watch.add(kPeer, 7);
  for (int i = 0; i < 50; i++) {
    g_now += 900ms;
    w.watch.on_message(kPeer, 7);
    w.watch.on_heartbeat_tick();
  }
  CHECK(w.failed.empty());
  CHECK(w.sent_of(SmMsgType::kHeartbeat) == 50);
}

TEST_CASE("a failed remote can fail again only after it was heard from again") {
  Watch w;
  w.watch.add(kPeer, 7);
  g_now += 2s;
  w.watch.on_heartbeat_tick();
  REQUIRE(w.failed.size() == 1);
  // Heard again, by a new incarnation (the process restarted)
  w.watch.on_message(kPeer, 8);
  g_now += 2s;
  w.watch.on_heartbeat_tick();
  REQUIRE(w.failed.size() == 2);
  CHECK(w.failed[1] == std::pair{kPeer, uint64_t{8}});
}

TEST_CASE("a remote never heard from, with no known incarnation, is not declared failed") {
  Watch w;
  w.watch.add(kPeer, 0);
  g_now += 1h;
  w.watch.on_heartbeat_tick();
  CHECK(w.failed.empty());
  CHECK(w.sent_of(SmMsgType::kHeartbeat) == 1);
}

TEST_CASE("a released remote is neither heartbeated nor failed") {
  Watch w;
  w.watch.add(kPeer, 7);
  w.watch.add(kOther, 9);
  w.watch.add(kPeer, 7);  // two sessions refer to it
  w.watch.release(kPeer);
  w.watch.release(kOther);
  g_now += 2s;
  w.watch.on_heartbeat_tick();
  // kPeer is still referred to once; kOther not at all
  REQUIRE(w.failed.size() == 1);
  CHECK(w.failed[0].first == kPeer);
  w.watch.release(kPeer);
  w.watch.on_message(kPeer, 7);
  g_now += 2s;
  const size_t sent_before = w.sent.size();
  w.watch.on_heartbeat_tick();
  CHECK(w.sent.size() == sent_before);
  CHECK(w.failed.size() == 1);
}

TEST_CASE("a foreign incarnation is probed, retried on time, and given up at the probe timeout") {
  Watch w;
  w.watch.add(kPeer, 7);
  // When a message claims another incarnation of the remote
  w.watch.on_message(kPeer, 8);
  // Expect one probe, and the claim disputed until the probe settles it
  REQUIRE(w.sent_of(SmMsgType::kProbeReq) == 1);
  CHECK(w.watch.disputed(kPeer, 8));
  CHECK_FALSE(w.watch.disputed(kPeer, 7));
  w.watch.on_message(kPeer, 8);  // a second claim while it is outstanding
  CHECK(w.sent_of(SmMsgType::kProbeReq) == 1);
  // Not resent before the retry interval, resent after it
  g_now += 19ms;
  w.watch.on_retry_tick();
  CHECK(w.sent_of(SmMsgType::kProbeReq) == 1);
  g_now += 1ms;
  w.watch.on_retry_tick();
  CHECK(w.sent_of(SmMsgType::kProbeReq) == 2);
  CHECK(w.stats.retransmissions == 1);
  // Unanswered until the probe timeout: given up, the known incarnation stands
  g_now += 80ms;
  w.watch.on_retry_tick();
  CHECK(w.stats.probe_timeouts == 1);
  CHECK(w.failed.empty());
  CHECK(w.watch.disputed(kPeer, 8));
  const size_t probes = w.sent_of(SmMsgType::kProbeReq);
  g_now += 1s;
  w.watch.on_retry_tick();
  CHECK(w.sent_of(SmMsgType::kProbeReq) == probes);
}

TEST_CASE(
    "a probe answered by the new incarnation fails the old one; a wrong nonce changes nothing") {
  Watch w;
  w.watch.add(kPeer, 7);
  w.watch.on_message(kPeer, 8);
  REQUIRE(w.sent_of(SmMsgType::kProbeReq) == 1);
  const uint64_t nonce = w.sent.back().first.token;
  SmMsg answer;
  answer.type = SmMsgType::kProbeResp;
  answer.incarnation = 8;
  // A forged answer (wrong nonce, or from elsewhere) is dropped and counted
  answer.token = nonce + 1;
  w.watch.on_probe_resp(answer, kPeer);
  answer.token = nonce;
  w.watch.on_probe_resp(answer, kOther);
  CHECK(w.stats.probe_resp_dropped == 2);
  CHECK(w.failed.empty());
  // The real answer decides
  w.watch.on_probe_resp(answer, kPeer);
  REQUIRE(w.failed.size() == 1);
  CHECK(w.failed[0] == std::pair{kPeer, uint64_t{7}});
  CHECK_FALSE(w.watch.disputed(kPeer, 8));
  CHECK(w.watch.disputed(kPeer, 7));
  // An answer replayed after the probe settled is dropped
  w.watch.on_probe_resp(answer, kPeer);
  CHECK(w.stats.probe_resp_dropped == 3);
}

TEST_CASE("a probe answered with the known incarnation counts a forgery and fails nothing") {
  Watch w;
  w.watch.add(kPeer, 7);
  w.watch.on_message(kPeer, 8);
  SmMsg answer;
  answer.type = SmMsgType::kProbeResp;
  answer.token = w.sent.back().first.token;
  answer.incarnation = 7;
  w.watch.on_probe_resp(answer, kPeer);
  CHECK(w.stats.incarnation_forgeries == 1);
  CHECK(w.failed.empty());
  CHECK_FALSE(w.watch.disputed(kPeer, 7));
}
