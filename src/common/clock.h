// Monotonic time for the engine. clock_gettime(CLOCK_MONOTONIC) goes
// through the vDSO (tens of ns), and the event loop reads it once per
// iteration, so rdtsc calibration is not worth its portability cost.
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
