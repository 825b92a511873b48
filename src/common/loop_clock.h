// The event loop's clock: CLOCK_MONOTONIC nanoseconds, read through the
// CPU's time-stamp counter where it runs at a constant rate, as eRPC reads
// rdtsc. The loop reads the time once per iteration; on this project's VMs
// a clock_gettime takes tens of nanoseconds (kvm-clock), a sizeable part of
// a same-host round trip, where rdtsc takes a few.
//
// How it stays CLOCK_MONOTONIC: it keeps an anchor, a (counter, time) pair
// read together, and scales counter ticks since the anchor by a rate it
// measures against clock_gettime itself. It takes a fresh anchor after
// about a millisecond of ticks (one clock_gettime per millisecond), so the
// two clocks never drift apart by more than the rate's error over one
// interval, and refines the rate each time from its first anchor (the
// longer the baseline, the smaller the error). Until the first
// millisecond has passed it has no rate and reads clock_gettime. The time
// it returns never goes backwards, also when the thread moves to a CPU
// whose counter is behind.
#pragma once

#include <algorithm>
#include <cstdint>

#include "common/clock.h"

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace rpc::detail {

// The 128-bit product of ticks and a fixed-point rate (a GCC and Clang
// extension; __extension__ keeps -Wpedantic quiet about it). Where it is
// missing (32-bit targets) the counter is not used.
#if defined(__SIZEOF_INT128__)
__extension__ typedef unsigned __int128 Uint128;
inline constexpr bool kHaveUint128 = true;
#else
typedef uint64_t Uint128;
inline constexpr bool kHaveUint128 = false;
#endif

// Whether this CPU's time-stamp counter is invariant (CPUID: it ticks at a
// constant rate in every power state), so that ticks measure time.
bool tsc_is_invariant();

// Where a clock reads its two sources. Tests substitute their own.
struct HardwareClockSource {
  static uint64_t monotonic_ns() { return now_ns(); }
#if defined(__x86_64__)
  static uint64_t ticks() { return __rdtsc(); }
#else
  static uint64_t ticks() { return 0; }  // never read: counter_usable() is false
#endif
  static bool counter_usable() {
#if defined(__x86_64__)
    static const bool usable = kHaveUint128 && tsc_is_invariant();
    return usable;
#else
    return false;
#endif
  }
};

template <typename Source>
class BasicLoopClock {
 public:
  // The rate is measured over at least this much time before ticks are
  // trusted, and the anchor is renewed after about as many ticks.
  static constexpr uint64_t kAnchorIntervalNs = 1'000'000;
  // A counter and clock pair read further apart than this was interrupted.
  static constexpr uint64_t kMaxPairTicks = 1 << 16;
  // How far apart a pair's two readings may stand (an interrupt between
  // them that kMaxPairTicks did not catch, the clock's own granularity).
  static constexpr uint64_t kPairJitterNs = 20'000;

  BasicLoopClock() : BasicLoopClock(Source::counter_usable()) {}
  explicit BasicLoopClock(bool use_counter) : use_counter_(use_counter) {
    if (use_counter_) take_first_anchor();
  }

  bool uses_counter() const { return use_counter_; }
  // Whether the rate is known (ticks are being scaled, not a clock_gettime
  // per read).
  bool calibrated() const { return ns_per_tick_q32_ != 0; }

  uint64_t now_ns() {
    if (!use_counter_) return Source::monotonic_ns();
    const uint64_t ticks_since = Source::ticks() - anchor_ticks_;
    // Also true when the counter is behind the anchor (the difference wraps).
    if (ticks_since >= reanchor_ticks_) [[unlikely]]
      return reanchor(ticks_since);
    return anchor_ns_ + scale(ticks_since);
  }

 private:
  uint64_t scale(uint64_t ticks) const {
    return static_cast<uint64_t>((static_cast<Uint128>(ticks) * ns_per_tick_q32_) >> 32);
  }

  void take_first_anchor() {
    read_pair(first_ticks_, first_ns_);
    anchor_ticks_ = first_ticks_;
    anchor_ns_ = first_ns_;
    anchor_read_ns_ = first_ns_;
    reanchor_ticks_ = 0;  // every read re-anchors until there is a rate
  }

  // A counter value and the time it stands for, read back to back (again
  // if the thread was interrupted in between, at most a few times).
  static void read_pair(uint64_t& ticks, uint64_t& ns) {
    for (int attempt = 0;; attempt++) {
      const uint64_t before = Source::ticks();
      ns = Source::monotonic_ns();
      const uint64_t after = Source::ticks();
      ticks = before + (after - before) / 2;
      if (after - before <= kMaxPairTicks || attempt == 2) return;
    }
  }

  uint64_t reanchor(uint64_t ticks_since) {
    // The latest time handed out since the last anchor, which the new one
    // must not fall below. A counter behind the anchor (the difference
    // wrapped) advanced nothing.
    const bool behind = ticks_since > (uint64_t{1} << 63);
    const uint64_t handed_out = calibrated() && !behind
                                    ? anchor_ns_ + scale(std::min(ticks_since, reanchor_ticks_))
                                    : anchor_ns_;
    uint64_t ticks = 0;
    uint64_t ns = 0;
    read_pair(ticks, ns);
    if (counter_jumped(ticks, ns)) {
      // Another CPU's counter, or a counter reset (a migrated VM): measure
      // the rate afresh from here, reading the clock meanwhile.
      first_ticks_ = ticks;
      first_ns_ = ns;
      ns_per_tick_q32_ = 0;
    } else if (ns - first_ns_ >= kAnchorIntervalNs) {
      // The rate over the whole baseline since the first anchor, from the
      // clock as read.
      const Uint128 q32 = (static_cast<Uint128>(ns - first_ns_) << 32) / (ticks - first_ticks_);
      ns_per_tick_q32_ = q32 > UINT64_MAX ? 0 : static_cast<uint64_t>(q32);
    }
    anchor_ticks_ = ticks;
    anchor_read_ns_ = ns;
    anchor_ns_ = std::max(ns, handed_out);
    reanchor_ticks_ = calibrated() ? ticks_for(kAnchorIntervalNs) : 0;
    return anchor_ns_;
  }

  // Whether the counter moved out of step with the clock since the last
  // anchor: backwards, or by more than 1/64 off the measured rate.
  bool counter_jumped(uint64_t ticks, uint64_t ns) const {
    if (ticks <= first_ticks_ || ticks < anchor_ticks_) return true;
    if (!calibrated()) return false;
    const uint64_t expected_ns = scale(ticks - anchor_ticks_);
    const uint64_t actual_ns = ns - anchor_read_ns_;
    const uint64_t error_ns =
        expected_ns > actual_ns ? expected_ns - actual_ns : actual_ns - expected_ns;
    return error_ns > expected_ns / 64 + kPairJitterNs;
  }

  uint64_t ticks_for(uint64_t ns) const {
    const Uint128 ticks = (static_cast<Uint128>(ns) << 32) / ns_per_tick_q32_;
    return ticks > UINT64_MAX ? UINT64_MAX : static_cast<uint64_t>(ticks);
  }

  bool use_counter_;
  uint64_t anchor_ticks_ = 0;
  uint64_t anchor_ns_ = 0;       // the time the anchor stands for (never below one handed out)
  uint64_t anchor_read_ns_ = 0;  // the clock as read at the anchor
  uint64_t reanchor_ticks_ = 0;
  uint64_t ns_per_tick_q32_ = 0;  // nanoseconds per tick, times 2^32; 0: not measured yet
  uint64_t first_ticks_ = 0;      // the first anchor: the rate's baseline
  uint64_t first_ns_ = 0;
};

using LoopClock = BasicLoopClock<HardwareClockSource>;

}  // namespace rpc::detail
