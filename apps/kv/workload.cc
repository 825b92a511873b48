#include "workload.h"

#include <fmt/core.h>

#include <cmath>
#include <stdexcept>

#include "protocol.h"

namespace kv {

double read_fraction(char mix) {
  switch (mix) {
    case 'a':
      return 0.5;
    case 'b':
      return 0.95;
    case 'c':
      return 1.0;
    default:
      throw std::invalid_argument(fmt::format("unknown workload '{}' (a, b or c)", mix));
  }
}

std::string key_name(uint64_t record) { return fmt::format("user{:012}", record); }

namespace {

double zeta(uint64_t n, double theta) {
  double sum = 0;
  for (uint64_t i = 1; i <= n; i++) sum += 1.0 / std::pow(static_cast<double>(i), theta);
  return sum;
}

}  // namespace

Zipfian::Zipfian(uint64_t items, double theta)
    : items_(items),
      theta_(theta),
      alpha_(1.0 / (1.0 - theta)),
      zeta_n_(zeta(items, theta)),
      eta_((1.0 - std::pow(2.0 / static_cast<double>(items), 1.0 - theta)) /
           (1.0 - zeta(2, theta) / zeta_n_)),
      half_pow_theta_(1.0 + std::pow(0.5, theta)) {
  if (items < 2 || theta <= 0 || theta >= 1) {
    throw std::invalid_argument("Zipfian needs at least 2 items and 0 < theta < 1");
  }
}

uint64_t Zipfian::next(double u) const {
  const double uz = u * zeta_n_;
  if (uz < 1.0) return 0;
  if (uz < half_pow_theta_) return 1;
  const auto n = static_cast<double>(items_);
  const auto r = static_cast<uint64_t>(n * std::pow(eta_ * u - eta_ + 1.0, alpha_));
  return r < items_ ? r : items_ - 1;
}

Workload::Workload(const WorkloadSpec& spec, uint64_t stream)
    : spec_(spec),
      read_fraction_(read_fraction(spec.mix)),
      zipf_(spec.keys < 2 ? 2 : spec.keys, spec.zipf_theta),
      rng_(spec.seed * 0x9e3779b97f4a7c15ull + stream),
      value_(spec.value_bytes_max, 'v') {
  if (spec.keys < 2) throw std::invalid_argument("a workload needs at least 2 keys");
  if (spec.value_bytes_min > spec.value_bytes_max || spec.value_bytes_max > kMaxValueBytes) {
    throw std::invalid_argument(fmt::format("value sizes must satisfy {} <= {} <= {}",
                                            spec.value_bytes_min, spec.value_bytes_max,
                                            kMaxValueBytes));
  }
}

uint64_t Workload::next_record() {
  if (spec_.distribution == KeyDistribution::kUniform) {
    return std::uniform_int_distribution<uint64_t>(0, spec_.keys - 1)(rng_);
  }
  // Scrambled, as YCSB's default: the popular ranks land on records spread
  // over the key space (and so over the partitions).
  const uint64_t rank = zipf_.next(unit_(rng_));
  const char* bytes = reinterpret_cast<const char*>(&rank);
  return key_hash(std::string_view(bytes, sizeof rank)) % spec_.keys;
}

Workload::Op Workload::next() {
  const bool read = unit_(rng_) < read_fraction_;
  const uint64_t record = next_record();
  size_t value_bytes = spec_.value_bytes_min;
  if (!read && spec_.value_bytes_max > spec_.value_bytes_min) {
    value_bytes =
        std::uniform_int_distribution<size_t>(spec_.value_bytes_min, spec_.value_bytes_max)(rng_);
  }
  return Op{read ? OpKind::kGet : OpKind::kPut, record, value_bytes};
}

}  // namespace kv
