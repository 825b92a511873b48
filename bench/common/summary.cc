// Round-trip-time summaries.
#include "common/summary.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <numeric>

namespace bench {

namespace {

double to_us(std::int64_t ns) { return static_cast<double>(ns) / 1000.0; }

}  // namespace

double percentile_us(const std::vector<std::int64_t>& sorted_ns, double p) {
  const auto n = sorted_ns.size();
  auto rank = static_cast<std::size_t>(std::ceil(p / 100.0 * static_cast<double>(n)));
  rank = std::clamp<std::size_t>(rank, 1, n);
  return to_us(sorted_ns[rank - 1]);
}

std::vector<double> downsample_us(const std::vector<std::int64_t>& sorted_ns,
                                  std::size_t max_points) {
  std::vector<double> out;
  const std::size_t n = sorted_ns.size();
  if (n == 0 || max_points == 0) return out;
  if (n <= max_points) {
    out.reserve(n);
    for (const std::int64_t v : sorted_ns) out.push_back(to_us(v));
    return out;
  }
  if (max_points == 1) return {to_us(sorted_ns.back())};
  out.reserve(max_points);
  // Rank i * (n - 1) / (max_points - 1), rounded: first and last included.
  for (std::size_t i = 0; i < max_points; ++i) {
    const std::size_t rank = (i * (n - 1) + (max_points - 1) / 2) / (max_points - 1);
    out.push_back(to_us(sorted_ns[rank]));
  }
  return out;
}

LatencySummary summarize(const std::vector<std::int64_t>& sorted_ns) {
  assert(!sorted_ns.empty());
  LatencySummary s;
  s.iters = sorted_ns.size();
  s.p50_us = percentile_us(sorted_ns, 50);
  s.p90_us = percentile_us(sorted_ns, 90);
  s.p99_us = percentile_us(sorted_ns, 99);
  s.p999_us = percentile_us(sorted_ns, 99.9);
  s.min_us = to_us(sorted_ns.front());
  s.max_us = to_us(sorted_ns.back());
  s.mean_us =
      static_cast<double>(std::accumulate(sorted_ns.begin(), sorted_ns.end(), std::int64_t{0})) /
      static_cast<double>(sorted_ns.size()) / 1000.0;
  return s;
}

}  // namespace bench
