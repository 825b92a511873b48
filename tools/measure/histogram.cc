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

std::uint64_t nearest_rank(double p, std::uint64_t count) noexcept {
  if (count == 0 || std::isnan(p) || p <= 0) return count == 0 ? 0 : 1;
  if (p >= 100) return count;
  // p in units of 1e-6 percent: 100 % is kWhole. With count = q * kWhole + r,
  // ceil(count * p / kWhole) = q * p + ceil(r * p / kWhole), where r * p stays
  // below 1e16: no overflow for any count.
  constexpr std::uint64_t kWhole = 100'000'000;
  const auto p_micro = static_cast<std::uint64_t>(std::llround(p * 1e6));
  const std::uint64_t q = count / kWhole, r = count % kWhole;
  const std::uint64_t rank = q * p_micro + (r * p_micro + kWhole - 1) / kWhole;
  return std::max<std::uint64_t>(rank, 1);
}

std::uint64_t Histogram::percentile_ns(double p) const {
  if (count_ == 0 || std::isnan(p)) return 0;
  if (p <= 0) return min_ns();
  if (p >= 100) return max_ns_;
  const std::uint64_t rank = nearest_rank(p, count_);
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
    // The last point is the maximum itself, even past the top bucket's range.
    const std::uint64_t high =
        seen == count_ ? max_ns_ : std::min(bucket_low(i) + bucket_width(i) - 1, max_ns_);
    points.emplace_back(static_cast<double>(high) / 1e3,
                        static_cast<double>(seen) / static_cast<double>(count_));
  }
  return points;
}

}  // namespace measure
