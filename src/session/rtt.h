// Round-trip time estimate and retransmission timeout of a session, as TCP
// computes them (RFC 6298): SRTT and RTTVAR from samples taken on packets
// sent once (Karn: a retransmitted packet's answer is ambiguous and gives
// none), RTO = SRTT + 4 RTTVAR, never below the configured floor
// (RpcConfig::rto_us) nor above kMaxRtoNs. The sample is what the engine
// sees: from handing a packet to the transport to accepting its answer,
// which includes the peer's handler for a request's last packet and any
// time either Rpc thread was descheduled; on a shared machine that is what
// keeps a descheduled peer from triggering spurious go-back-N.
#pragma once

#include <algorithm>
#include <cstdint>

namespace rpc::detail {

class RttEstimator {
 public:
  static constexpr uint64_t kMaxRtoNs = uint64_t{1'000'000'000};  // 1 s

  explicit RttEstimator(uint64_t rto_floor_ns = 0) : floor_ns_(rto_floor_ns) {}

  void add_sample(uint64_t rtt_ns) {
    if (samples_ == 0) {
      srtt_ns_ = rtt_ns;
      rttvar_ns_ = rtt_ns / 2;
    } else {
      const uint64_t err = srtt_ns_ > rtt_ns ? srtt_ns_ - rtt_ns : rtt_ns - srtt_ns_;
      rttvar_ns_ = (3 * rttvar_ns_ + err) / 4;
      srtt_ns_ = (7 * srtt_ns_ + rtt_ns) / 8;
    }
    samples_++;
  }

  // The floor until a sample exists.
  uint64_t rto_ns() const {
    if (samples_ == 0) return std::max<uint64_t>(floor_ns_, 1);
    return std::clamp(srtt_ns_ + 4 * rttvar_ns_, floor_ns_, std::max(floor_ns_, kMaxRtoNs));
  }
  // After `backoff` timeouts in a row: doubled each time, but never past
  // kMaxRtoNs (or the floor, if that is higher). Uncapped, a session whose
  // RTO grew on a loaded machine (descheduled peers inflate the samples)
  // waited up to 64 s between retransmissions of a slot.
  uint64_t backed_off_rto_ns(unsigned backoff) const {
    const uint64_t rto = rto_ns();
    return std::min(rto << backoff, std::max(rto, kMaxRtoNs));
  }
  uint64_t srtt_ns() const { return srtt_ns_; }
  bool has_sample() const { return samples_ != 0; }
  uint64_t rttvar_ns() const { return rttvar_ns_; }

 private:
  uint64_t floor_ns_;
  uint64_t srtt_ns_ = 0;
  uint64_t rttvar_ns_ = 0;
  uint64_t samples_ = 0;
};

}  // namespace rpc::detail
