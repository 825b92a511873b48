// A log-linear latency histogram in the style of HdrHistogram: values below
// 256 ns are counted exactly, and every power-of-two range above is split
// into 128 linear sub-buckets, so a reported value is within 1/256 (0.4%) of
// every sample in its bucket. Fixed memory (about 35 KB), no allocation and
// O(1) work per record(): safe inside a measurement loop.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

namespace measure {

// The nearest rank (1-based) of percentile p in [0, 100] of `count` samples:
// ceil(p / 100 * count), computed in integers with p rounded to 1e-6, so
// that 99.9 of 1000 is 999 (in doubles 99.9 / 100 * 1000 rounds up to 1000).
std::uint64_t nearest_rank(double p, std::uint64_t count) noexcept;

class Histogram {
 public:
  // 2^kSubBucketBits exact values, then 2^(kSubBucketBits-1) sub-buckets
  // per power of two.
  static constexpr int kSubBucketBits = 8;
  static constexpr std::uint64_t kLinearLimit = std::uint64_t{1} << kSubBucketBits;  // 256
  static constexpr std::uint64_t kSubBuckets = kLinearLimit / 2;                     // 128
  // The largest value with its own bucket: 2^40 ns (about 18 minutes).
  // Larger samples count in the last bucket; max() stays exact.
  static constexpr int kMaxValueBits = 40;
  static constexpr std::size_t kBuckets =
      kLinearLimit + (kMaxValueBits - kSubBucketBits) * kSubBuckets;
  // Half a bucket's width relative to its lowest value: the largest
  // relative error of a reported percentile.
  static constexpr double kRelativeError = 1.0 / (2.0 * kSubBuckets);

  // Counts one sample of value_ns nanoseconds.
  void record(std::uint64_t value_ns) noexcept {
    ++counts_[bucket_of(value_ns)];
    ++count_;
    sum_ns_ += static_cast<double>(value_ns);
    if (value_ns < min_ns_) min_ns_ = value_ns;
    if (value_ns > max_ns_) max_ns_ = value_ns;
  }
  // Adds every sample of other.
  void merge(const Histogram& other) noexcept;
  void reset() noexcept { *this = Histogram{}; }

  std::uint64_t count() const { return count_; }
  bool empty() const { return count_ == 0; }
  // Exact; 0 when empty.
  std::uint64_t min_ns() const { return count_ ? min_ns_ : 0; }
  std::uint64_t max_ns() const { return max_ns_; }
  double mean_ns() const { return count_ ? sum_ns_ / static_cast<double>(count_) : 0; }

  // Nearest-rank percentile, p in [0, 100] (99.9, 99.99, ...): the middle of
  // the bucket holding the sample of rank ceil(p/100 * count), clamped to
  // [min, max]; p = 0 and p = 100 are the exact min and max. 0 when empty.
  // REQUIRES: p is not NaN (NaN gives 0).
  std::uint64_t percentile_ns(double p) const;
  double percentile_us(double p) const { return static_cast<double>(percentile_ns(p)) / 1e3; }

  // One point per non-empty bucket, ascending: (value in microseconds, the
  // fraction of samples <= that value). The value is the bucket's highest
  // (clamped to max), so the last point is (max, 1). Enough points for a
  // CDF plot to resolve p99.99 whenever 10^4 samples or more were taken.
  std::vector<std::pair<double, double>> cdf_us() const;

  // Bucket arithmetic, public for the tests.
  static std::size_t bucket_of(std::uint64_t value_ns) noexcept {
    if (value_ns < kLinearLimit) return static_cast<std::size_t>(value_ns);
    const int msb = 63 - __builtin_clzll(value_ns);
    if (msb >= kMaxValueBits) return kBuckets - 1;
    const int shift = msb - (kSubBucketBits - 1);                 // >= 1
    const std::uint64_t sub = (value_ns >> shift) - kSubBuckets;  // [0, 128)
    return static_cast<std::size_t>(kLinearLimit +
                                    static_cast<std::uint64_t>(shift - 1) * kSubBuckets + sub);
  }
  static std::uint64_t bucket_low(std::size_t bucket) noexcept;
  static std::uint64_t bucket_width(std::size_t bucket) noexcept;

 private:
  std::array<std::uint64_t, kBuckets> counts_{};
  std::uint64_t count_ = 0;
  double sum_ns_ = 0;
  std::uint64_t min_ns_ = std::numeric_limits<std::uint64_t>::max();
  std::uint64_t max_ns_ = 0;
};

}  // namespace measure
