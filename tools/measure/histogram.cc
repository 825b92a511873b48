#include "histogram.h"

#include <algorithm>
#include <cmath>

namespace measure {

std::uint64_t Histogram::bucket_low(std::size_t bucket) noexcept {
  if (bucket < kLinearLimit) return bucket;
  const std::size_t k = bucket - kLinearLimit;
  const int shift = static_cast<int>(k / kSubBuckets) + 1;
  return (kSubBuckets + k % kSubBuckets) << shift;
}

std::uint64_t Histogram::bucket_width(std::size_t bucket) noexcept {
  if (bucket < kLinearLimit) return 1;
  return std::uint64_t{1} << ((bucket - kLinearLimit) / kSubBuckets + 1);
}

void Histogram::merge(const Histogram& other) noexcept {
  for (std::size_t i = 0; i < kBuckets; ++i) counts_[i] += other.counts_[i];
  count_ += other.count_;
  sum_ns_ += other.sum_ns_;
  min_ns_ = std::min(min_ns_, other.min_ns_);
  max_ns_ = std::max(max_ns_, other.max_ns_);
}

std::uint64_t Histogram::percentile_ns(double p) const {
  if (count_ == 0) return 0;
  if (p <= 0) return min_ns();
  if (p >= 100) return max_ns_;
  const auto rank = std::max<std::uint64_t>(
      1, static_cast<std::uint64_t>(std::ceil(p / 100.0 * static_cast<double>(count_))));
  std::uint64_t seen = 0;
  for (std::size_t i = 0; i < kBuckets; ++i) {
    seen += counts_[i];
    if (seen >= rank) {
      const std::uint64_t mid = bucket_low(i) + bucket_width(i) / 2;
      return std::clamp(mid, min_ns(), max_ns_);
    }
  }
  return max_ns_;
}

std::vector<std::pair<double, double>> Histogram::cdf_us() const {
  std::vector<std::pair<double, double>> points;
  std::uint64_t seen = 0;
  for (std::size_t i = 0; i < kBuckets && seen < count_; ++i) {
    if (counts_[i] == 0) continue;
    seen += counts_[i];
    const std::uint64_t high = std::min(bucket_low(i) + bucket_width(i) - 1, max_ns_);
    points.emplace_back(static_cast<double>(high) / 1e3,
                        static_cast<double>(seen) / static_cast<double>(count_));
  }
  return points;
}

}  // namespace measure
