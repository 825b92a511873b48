// YCSB-style workloads (Cooper et al., SoCC'10): a key space of `keys`
// records named like YCSB's ("user" + number), chosen uniformly or by
// YCSB's scrambled Zipfian (theta 0.99: a few keys take most requests, and
// the hash scatters them over the partitions), a read/update mix (A 50/50,
// B 95/5, C read-only), and value sizes fixed or uniform in a range. One
// Workload per load thread; deterministic for a seed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <string_view>

namespace kv {

enum class KeyDistribution : uint8_t { kUniform, kZipfian };
enum class OpKind : uint8_t { kGet, kPut };

struct WorkloadSpec {
  char mix = 'a';  // 'a', 'b' or 'c'
  uint64_t keys = 100'000;
  KeyDistribution distribution = KeyDistribution::kZipfian;
  double zipf_theta = 0.99;  // YCSB's ZIPFIAN_CONSTANT
  size_t value_bytes_min = 32;
  size_t value_bytes_max = 32;
  uint64_t seed = 1;
};

// The fraction of reads of a mix; throws std::invalid_argument for another.
double read_fraction(char mix);

// "user" + the record number, zero-padded to 12 digits: 16-byte keys, like
// YCSB's and within memcached's 250.
std::string key_name(uint64_t record);

// YCSB's ZipfianGenerator (Gray et al., SIGMOD'94) over [0, items).
class Zipfian {
 public:
  Zipfian(uint64_t items, double theta);
  // u uniform in [0, 1).
  uint64_t next(double u) const;
  double zeta_n() const { return zeta_n_; }

 private:
  uint64_t items_;
  double theta_, alpha_, zeta_n_, eta_, half_pow_theta_;
};

class Workload {
 public:
  explicit Workload(const WorkloadSpec& spec, uint64_t stream = 0);

  struct Op {
    OpKind kind;
    uint64_t record;
    size_t value_bytes;  // for kPut
  };
  Op next();
  // The record for the next key drawn from the distribution.
  uint64_t next_record();
  const WorkloadSpec& spec() const { return spec_; }
  // Bytes for values: value_bytes_max bytes, the same for every put (the
  // service does not look at them; a loader checks sizes, not contents).
  const std::string& value_bytes() const { return value_; }

 private:
  WorkloadSpec spec_;
  double read_fraction_;
  Zipfian zipf_;
  std::mt19937_64 rng_;
  std::uniform_real_distribution<double> unit_{0.0, 1.0};
  std::string value_;
};

}  // namespace kv
