// LoopClock (common/loop_clock.h): the event loop's CLOCK_MONOTONIC, read
// through the time-stamp counter. Driven by a scripted counter and clock,
// then checked against the real ones.
#include <catch2/catch.hpp>
#include <cstdint>

#include "common/clock.h"
#include "common/loop_clock.h"

namespace {

// A counter and a clock the test sets; counts the clock's reads.
struct ScriptedSource {
  static inline uint64_t ticks_now = 0;
  static inline uint64_t clock_ns = 0;
  static inline uint64_t clock_reads = 0;
  static uint64_t ticks() { return ticks_now; }
  static uint64_t monotonic_ns() {
    clock_reads++;
    return clock_ns;
  }
  static bool counter_usable() { return true; }
  // A counter at 4 ticks per ns (a rate the clock's fixed point holds
  // exactly), and the clock in step with it.
  static constexpr uint64_t kTicksPerNs = 4;
  static void set(uint64_t ns) {
    clock_ns = ns;
    ticks_now = kTicksPerNs * ns;
  }
};

using ScriptedClock = rpc::detail::BasicLoopClock<ScriptedSource>;
constexpr uint64_t kStartNs = 5'000'000'000;
constexpr uint64_t kIntervalNs = ScriptedClock::kAnchorIntervalNs;
constexpr uint64_t kTicksPerNs = ScriptedSource::kTicksPerNs;

// A clock that has measured the rate: a millisecond after its first anchor.
ScriptedClock calibrated_clock() {
  ScriptedSource::set(kStartNs);
  ScriptedClock clock;
  ScriptedSource::set(kStartNs + kIntervalNs);
  REQUIRE(clock.now_ns() == kStartNs + kIntervalNs);
  REQUIRE(clock.calibrated());
  return clock;
}

}  // namespace

TEST_CASE("the loop clock reads the monotonic clock until it has measured the counter's rate") {
  ScriptedSource::set(kStartNs);
  ScriptedClock clock;
  CHECK(clock.uses_counter());
  CHECK_FALSE(clock.calibrated());
  // Given: less than a millisecond of baseline
  ScriptedSource::set(kStartNs + kIntervalNs / 2);
  ScriptedSource::clock_ns += 7;  // the clock, not the counter, is what it reports
  // Expect: the clock's time, and still no rate
  CHECK(clock.now_ns() == kStartNs + kIntervalNs / 2 + 7);
  CHECK_FALSE(clock.calibrated());
}

TEST_CASE("once calibrated, the loop clock scales ticks without reading the monotonic clock") {
  ScriptedClock clock = calibrated_clock();
  const uint64_t reads = ScriptedSource::clock_reads;
  // Given: 4,000 ticks later, and a clock that would say otherwise
  ScriptedSource::ticks_now += 4000;
  ScriptedSource::clock_ns += 999'999;
  // Expect: 1,000 ns on from the anchor, with no clock read
  CHECK(clock.now_ns() == kStartNs + kIntervalNs + 1000);
  CHECK(ScriptedSource::clock_reads == reads);
}

TEST_CASE("the loop clock takes a fresh anchor from the monotonic clock after a millisecond") {
  ScriptedClock clock = calibrated_clock();
  const uint64_t reads = ScriptedSource::clock_reads;
  // Given: a millisecond of ticks, and the clock 500 ns ahead of them
  ScriptedSource::set(kStartNs + 2 * kIntervalNs);
  ScriptedSource::clock_ns += 500;
  // Expect: the clock's time, read once
  CHECK(clock.now_ns() == kStartNs + 2 * kIntervalNs + 500);
  CHECK(ScriptedSource::clock_reads == reads + 1);
  CHECK(clock.calibrated());
}

TEST_CASE("the loop clock never goes back, even when a fresh anchor's clock is behind") {
  ScriptedClock clock = calibrated_clock();
  // Given: the last time handed out before the anchor is due
  ScriptedSource::ticks_now += kTicksPerNs * (kIntervalNs - 1);
  const uint64_t last = clock.now_ns();
  CHECK(last == kStartNs + 2 * kIntervalNs - 1);
  // When: the anchor is due and the clock reads 400 ns behind the counter
  ScriptedSource::ticks_now += kTicksPerNs;
  ScriptedSource::clock_ns = kStartNs + 2 * kIntervalNs - 400;
  // Expect: no earlier time than what was handed out
  CHECK(clock.now_ns() >= last);
}

TEST_CASE("the loop clock does not go back when the counter does (another CPU's counter)") {
  ScriptedClock clock = calibrated_clock();
  ScriptedSource::ticks_now += kTicksPerNs * 500;
  const uint64_t last = clock.now_ns();
  CHECK(last == kStartNs + kIntervalNs + 500);
  // Given: a counter far behind, the clock 100 ns on
  ScriptedSource::ticks_now = kTicksPerNs * (kStartNs - kIntervalNs);
  ScriptedSource::clock_ns = kStartNs + kIntervalNs + 600;
  // Expect: the clock's time, and the rate measured afresh
  CHECK(clock.now_ns() == kStartNs + kIntervalNs + 600);
  CHECK_FALSE(clock.calibrated());
  ScriptedSource::clock_ns += 50;
  CHECK(clock.now_ns() == kStartNs + kIntervalNs + 650);  // the clock again, not the counter
}

TEST_CASE(
    "a counter that leaps ahead of the clock is not trusted until its rate is measured again") {
  ScriptedClock clock = calibrated_clock();
  // Given: ten seconds of ticks while the clock moved two milliseconds
  ScriptedSource::ticks_now += kTicksPerNs * uint64_t{10'000'000'000};
  ScriptedSource::clock_ns += 2 * kIntervalNs;
  const uint64_t fresh = ScriptedSource::clock_ns;
  // Expect: the clock's time, not ten seconds on, and no rate
  CHECK(clock.now_ns() == fresh);
  CHECK_FALSE(clock.calibrated());
  // Then, a millisecond later in step again: calibrated anew
  ScriptedSource::ticks_now += kTicksPerNs * kIntervalNs;
  ScriptedSource::clock_ns += kIntervalNs;
  CHECK(clock.now_ns() == fresh + kIntervalNs);
  CHECK(clock.calibrated());
}

TEST_CASE("a loop clock without the counter reads the monotonic clock every time") {
  ScriptedSource::set(kStartNs);
  ScriptedClock clock(false);
  CHECK_FALSE(clock.uses_counter());
  const uint64_t reads = ScriptedSource::clock_reads;
  ScriptedSource::clock_ns += 1234;
  CHECK(clock.now_ns() == kStartNs + 1234);
  CHECK(ScriptedSource::clock_reads == reads + 1);
}

TEST_CASE("the loop clock keeps to CLOCK_MONOTONIC on this machine, and never goes back") {
  rpc::detail::LoopClock clock;
  INFO("time-stamp counter used: " << clock.uses_counter());
  // Over 20 ms (several anchors): each reading falls between the
  // monotonic clock's readings around it, within the error one anchor
  // interval's rate may leave (a descheduling only widens the bracket).
  constexpr uint64_t kToleranceNs = 50'000;
  uint64_t previous = 0;
  const uint64_t end_ns = rpc::detail::now_ns() + 20'000'000;
  uint64_t readings = 0;
  for (uint64_t before = rpc::detail::now_ns(); before < end_ns; before = rpc::detail::now_ns()) {
    const uint64_t t = clock.now_ns();
    const uint64_t after = rpc::detail::now_ns();
    REQUIRE(t + kToleranceNs >= before);
    REQUIRE(t <= after + kToleranceNs);
    REQUIRE(t >= previous);
    previous = t;
    readings++;
  }
  CHECK(readings > 100);
  if (clock.uses_counter()) CHECK(clock.calibrated());
}
