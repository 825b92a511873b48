// Timely's rate computation (cc/timely.h) and the timing wheel
// (cc/timing_wheel.h), on times the tests choose: no clock, no sleeping.
#include <catch2/catch.hpp>
#include <cstdint>
#include <vector>

#include "cc/timely.h"
#include "cc/timing_wheel.h"

using rpc::detail::Timely;
using rpc::detail::TimelyParams;
using rpc::detail::TimingWheel;

namespace {

constexpr double kLink = 1.25e9;  // 10 Gbit/s in bytes per second
constexpr uint64_t kUs = 1000;

TimelyParams params() { return TimelyParams{.link_bytes_per_s = kLink}; }

}  // namespace

TEST_CASE("Timely: an uncongested session with short round trips keeps the full rate") {
  const TimelyParams p = params();
  Timely t(p, 0);
  uint64_t now = 0;
  for (int i = 0; i < 1000; i++) t.on_rtt_sample(now += 10 * kUs, 20 * kUs);
  CHECK(t.uncongested());
  CHECK(t.rate_bytes_per_s() == kLink);
}

TEST_CASE("Timely: a round trip past t_high cuts the rate in proportion, never below half") {
  const TimelyParams p = params();
  Timely t(p, 0);
  // 2 ms against t_high 1 ms: x (1 - 0.26 x (1 - 1/2)) = x 0.87
  t.on_rtt_sample(100 * kUs, 2000 * kUs);
  CHECK(t.rate_bytes_per_s() == Approx(kLink * 0.87));
  CHECK_FALSE(t.uncongested());
  // A huge one: at most halved in one step
  Timely u(p, 0);
  u.on_rtt_sample(100 * kUs, 1'000'000 * kUs);
  CHECK(u.rate_bytes_per_s() >= kLink / 2 * 0.999);
  CHECK(u.rate_bytes_per_s() == Approx(kLink * (1 - 0.26 * (1 - 0.001))));
}

TEST_CASE(
    "Timely: rising round trips between t_low and t_high lower the rate; falling ones raise it") {
  const TimelyParams p = params();
  Timely t(p, 0);
  uint64_t now = 0;
  uint64_t rtt = 100 * kUs;
  t.on_rtt_sample(now += 100 * kUs, rtt);  // the first sample sets no gradient
  CHECK(t.rate_bytes_per_s() == kLink);
  double last = kLink;
  for (int i = 0; i < 10; i++) {  // +200 ns a sample: about 1% less each
    t.on_rtt_sample(now += 100 * kUs, rtt += 200);
    CHECK(t.rate_bytes_per_s() < last);  // positive gradient: decrease
    last = t.rate_bytes_per_s();
  }
  // Falling: the smoothed gradient turns negative after a few samples, then
  // the rate grows by the additive step (5 MB/s), 5x after five falls in a row
  std::vector<double> rates;
  for (int i = 0; i < 12; i++) {
    t.on_rtt_sample(now += 100 * kUs, rtt -= 100);
    rates.push_back(t.rate_bytes_per_s());
  }
  CHECK(rates.back() > rates.front());
  const double step_late = rates[11] - rates[10];
  CHECK(step_late == Approx(5 * p.add_bytes_per_s));
}

TEST_CASE("Timely: below t_low the rate climbs back to the link rate by additive steps") {
  const TimelyParams p = params();
  Timely t(p, 0);
  t.on_rtt_sample(100 * kUs, 5000 * kUs);  // congested
  const double low = t.rate_bytes_per_s();
  REQUIRE(low < kLink);
  uint64_t now = 100 * kUs;
  t.on_rtt_sample(now += 10 * kUs, 20 * kUs);
  CHECK(t.rate_bytes_per_s() == Approx(low + p.add_bytes_per_s));
  for (int i = 0; i < 100000 && !t.uncongested(); i++) t.on_rtt_sample(now += 10 * kUs, 20 * kUs);
  CHECK(t.uncongested());
  CHECK(t.rate_bytes_per_s() == kLink);  // capped at the link rate
}

TEST_CASE("Timely: the rate never drops below the minimum, and close samples move it less") {
  const TimelyParams p = params();
  Timely t(p, 0);
  uint64_t now = 0;
  for (int i = 0; i < 1000; i++) t.on_rtt_sample(now += 100 * kUs, 10'000 * kUs);
  CHECK(t.rate_bytes_per_s() == p.min_bytes_per_s);
  // Two samples 0.5 us apart (a quarter of min_rtt): a quarter of the step
  Timely u(p, 0);
  u.on_rtt_sample(100 * kUs, 5000 * kUs);
  const double before = u.rate_bytes_per_s();
  u.on_rtt_sample(100 * kUs + 500, 20 * kUs);
  CHECK(u.rate_bytes_per_s() == Approx(before + p.add_bytes_per_s / 4));
  // A sample below the minimum RTT is ignored
  const double kept = u.rate_bytes_per_s();
  u.on_rtt_sample(200 * kUs, 1 * kUs);
  CHECK(u.rate_bytes_per_s() == kept);
}

TEST_CASE("Timely: a retransmission timeout halves the rate, down to the minimum") {
  const TimelyParams p = params();
  Timely t(p, 0);
  // Given a session at the full rate that has no RTT sample at all (every
  // window lost a packet)
  REQUIRE(t.uncongested());
  // When a timeout fires, it is paced at half the rate
  t.on_loss(10 * kUs, 5 * kUs);
  CHECK(t.rate_bytes_per_s() == Approx(kLink * (1 - p.loss_beta)));
  CHECK_FALSE(t.uncongested());
  // and timeouts in a row take it to the minimum, never below
  for (int i = 0; i < 64; i++) t.on_loss(10 * kUs * (i + 2), 5 * kUs);
  CHECK(t.rate_bytes_per_s() == p.min_bytes_per_s);
  // from where short round trips bring it back up
  const double low = t.rate_bytes_per_s();
  t.on_rtt_sample(10 * kUs * 80, 20 * kUs);
  CHECK(t.rate_bytes_per_s() > low);
}

TEST_CASE("Timely: timeouts within one RTO are one loss event, cut once") {
  const TimelyParams p = params();
  Timely t(p, 0);
  // When eight slots time out in the same scan, and again 1 us later
  for (int i = 0; i < 8; i++) t.on_loss(100 * kUs, 50 * kUs);
  t.on_loss(101 * kUs, 50 * kUs);
  // Expect one halving
  CHECK(t.rate_bytes_per_s() == Approx(kLink * (1 - p.loss_beta)));
  // and a second one once an RTO has passed
  t.on_loss(150 * kUs, 50 * kUs);
  CHECK(t.rate_bytes_per_s() == Approx(kLink * (1 - p.loss_beta) * (1 - p.loss_beta)));
}

TEST_CASE("Timely: a cut undone gives back what it took, once, and no more") {
  const TimelyParams p = params();
  Timely t(p, 0);
  // Given a cut from the full rate
  REQUIRE(t.on_loss(100 * kUs, 50 * kUs));
  CHECK_FALSE(t.on_loss(110 * kUs, 50 * kUs));  // the same loss event
  CHECK(t.cuts() == 1);
  // When it is undone, the full rate is back, and a second undo does nothing
  CHECK(t.undo_loss());
  CHECK(t.rate_bytes_per_s() == Approx(kLink));
  CHECK(t.uncongested());
  CHECK_FALSE(t.undo_loss());
  // Given a second cut, and then a round trip past t_high that cut further
  REQUIRE(t.on_loss(200 * kUs, 50 * kUs));
  const double before = kLink;
  t.on_rtt_sample(300 * kUs, 5 * p.t_high_ns);
  const double after_rtt = t.rate_bytes_per_s();
  REQUIRE(after_rtt < before * (1 - p.loss_beta));
  // Expect the undo to give back the loss cut's factor only: the RTT's cut
  // stays
  CHECK(t.undo_loss());
  CHECK(t.rate_bytes_per_s() == Approx(after_rtt / (1 - p.loss_beta)));
  CHECK(t.rate_bytes_per_s() < before);
}

TEST_CASE("Timely: the time of a packet at the current rate") {
  const TimelyParams p = params();
  Timely t(p, 0);
  CHECK(t.ns_for(1250) == 1000);  // 1250 B at 1.25 GB/s: 1 us
}

TEST_CASE("timing wheel: entries come out at their time or up to one slot later, in time order") {
  // 1 us slots, 100 of them
  TimingWheel w(1000, 100, /*now_ns=*/0);
  w.insert(3, 3500, 0);  // due in slot [3 us, 4 us): out at 4 us
  w.insert(1, 1000, 0);  // exactly at a slot end: out at 1 us
  w.insert(2, 1200, 0);
  w.insert(0, 0, 0);  // due now: at the end of the current slot, after 1
  CHECK(w.size() == 4);
  std::vector<uint64_t> out;
  CHECK(w.reap(999, out) == 0);
  CHECK(w.reap(1000, out) == 2);
  CHECK(out == std::vector<uint64_t>{1, 0});
  CHECK(w.reap(1999, out) == 0);
  CHECK(w.reap(2000, out) == 1);
  CHECK(w.reap(3999, out) == 0);
  CHECK(w.reap(4000, out) == 1);
  CHECK(out == std::vector<uint64_t>{1, 0, 2, 3});
  CHECK(w.size() == 0);
}

TEST_CASE(
    "timing wheel: entries of one slot keep their order; beyond the horizon they wait at it") {
  TimingWheel w(1000, 10, 0);
  for (uint64_t i = 0; i < 50; i++) w.insert(i, 5000, 0);
  w.insert(99, 1'000'000, 0);  // 1 ms ahead, horizon 9 us
  std::vector<uint64_t> out;
  CHECK(w.reap(5000, out) == 50);
  for (uint64_t i = 0; i < 50; i++) CHECK(out[i] == i);
  out.clear();
  CHECK(w.reap(9999, out) == 0);
  CHECK(w.reap(10000, out) == 1);
  CHECK(out == std::vector<uint64_t>{99});
}

TEST_CASE("timing wheel: it turns many times, and skips a long idle gap at once") {
  TimingWheel w(1000, 8, 0);
  std::vector<uint64_t> out;
  uint64_t now = 0;
  // Paced: one entry every 3 us for 1000 turns' worth, each out on time
  for (uint64_t i = 0; i < 3000; i++) {
    w.insert(i, now + 3000, now);
    now += 3000;
    out.clear();
    CHECK(w.reap(now, out) == 1);
    CHECK(out == std::vector<uint64_t>{i});
  }
  // Entries left before a gap of an hour come out in order at its end
  w.insert(1, now + 2000, now);
  w.insert(2, now + 5000, now);
  now += 3'600'000'000'000ull;
  out.clear();
  CHECK(w.reap(now, out) == 2);
  CHECK(out == std::vector<uint64_t>{1, 2});
  // and the wheel is on time afterwards
  w.insert(3, now + 1500, now);
  out.clear();
  CHECK(w.reap(now + 1000, out) == 0);
  CHECK(w.reap(now + 2000, out) == 1);
}

TEST_CASE("Timely relative to the base RTT: the thresholds count from the smallest RTT seen") {
  TimelyParams p = params();
  p.relative_to_base = true;
  p.t_low_ns = 300 * kUs;
  p.t_high_ns = 800 * kUs;
  Timely t(p, 0);
  uint64_t now = 0;
  // A path whose round trips are 400 us at best (host delays, no queue)
  // stays at the full rate: 400 us is within t_low of its base
  for (int i = 0; i < 100; i++) t.on_rtt_sample(now += 100 * kUs, 400 * kUs + (i % 3) * 50 * kUs);
  CHECK(t.base_rtt_ns() == 400 * kUs);
  CHECK(t.uncongested());
  // (with absolute thresholds, 400 us is a congested path)
  const TimelyParams abs_params = params();
  Timely absolute(abs_params, 0);
  absolute.on_rtt_sample(100 * kUs, 400 * kUs);
  absolute.on_rtt_sample(200 * kUs, 450 * kUs);
  CHECK_FALSE(absolute.uncongested());
  // A queue of 1.6 ms over the base: past t_high, cut by 0.26 x (1 - 1200/2000)
  t.on_rtt_sample(now += 100 * kUs, 2000 * kUs);
  CHECK(t.rate_bytes_per_s() == Approx(kLink * (1 - 0.26 * (1 - 1200.0 / 2000))));
}
