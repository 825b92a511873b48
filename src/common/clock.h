// Monotonic time: clock_gettime(CLOCK_MONOTONIC), through the vDSO. The
// event loop reads its time through LoopClock (common/loop_clock.h), which
// reads the time-stamp counter where it can and this clock otherwise.
#pragma once

#include <time.h>

#include <cstdint>

namespace rpc::detail {

inline uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace rpc::detail
