// Round-trip-time summaries: nearest-rank percentiles and a down-sampled
// copy of the sorted sample for CDF plots.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace bench {

// Nearest-rank percentile (p in [0, 100]) of a sorted, non-empty sample of
// nanoseconds, in microseconds.
double percentile_us(const std::vector<std::int64_t>& sorted_ns, double p);

// At most max_points values of a sorted sample, evenly spaced by rank and
// always including the minimum and the maximum, in microseconds. The whole
// sample when it is small enough.
std::vector<double> downsample_us(const std::vector<std::int64_t>& sorted_ns,
                                  std::size_t max_points);

struct LatencySummary {
  std::size_t iters = 0;
  double p50_us = 0, p90_us = 0, p99_us = 0, p999_us = 0;
  double min_us = 0, max_us = 0, mean_us = 0;
};

// REQUIRES: sorted_ns is sorted and non-empty.
LatencySummary summarize(const std::vector<std::int64_t>& sorted_ns);

}  // namespace bench
