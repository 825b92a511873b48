// Timely congestion control (Mittal et al., SIGCOMM 2015), per session, as
// eRPC runs it: the sending rate follows the gradient of the round-trip
// time. Below t_low the rate grows by a fixed step; above t_high it drops in
// proportion to how far the RTT is past t_high; in between it drops when
// the (smoothed) RTT rises and grows when it falls, five times faster after
// five falls in a row (hyperactive increase). Rates are in bytes per second,
// times in nanoseconds of the engine's clock.
//
// The common case costs one comparison: a session at the full rate whose
// RTT is below t_low keeps the full rate without any arithmetic (eRPC's
// "Timely bypass").
//
// A retransmission timeout halves the rate (on_loss): under heavy loss no
// RTT sample arrives at all, and only the timeouts tell a sender to slow.
// A timeout that proves spurious (every slot it rolled back was answered
// twice: nothing had been lost) gives the cut back (undo_loss), as TCP
// undoes a window reduction on D-SACK or Eifel evidence: on a busy machine
// nearly every timeout is a descheduled peer, and each one halved the rate.
//
// Fed by the engine's RTT samples (rpc/credits.cc) and timeouts
// (rpc/pkt_loss.cc) when
// RpcConfig::congestion_control is on; unit-tested in test/test_timely.cc.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace rpc::detail {

struct TimelyParams {
  double link_bytes_per_s;              // the rate of an uncongested session
  double min_bytes_per_s = 15'000'000;  // never below (eRPC: 15 MB/s)
  double add_bytes_per_s = 5'000'000;   // the additive step (eRPC: 5 MB/s)
  uint64_t min_rtt_ns = 2'000;          // normalizes the gradient
  uint64_t t_low_ns = 50'000;           // below: additive increase
  uint64_t t_high_ns = 1'000'000;       // above: decrease by how far past
  double ewma_alpha = 0.46;             // weight of a new RTT difference
  double beta = 0.26;                   // multiplicative decrease factor
  size_t hai_after = 5;                 // falls in a row before 5x increases
  double loss_beta = 0.5;               // a retransmission timeout cuts this much
  // false: t_low and t_high are absolute and the gradient is normalized by
  // min_rtt_ns, as in eRPC (microsecond RTTs from NIC-to-NIC paths). true:
  // both thresholds count from the smallest RTT the session has seen (its
  // base RTT), which also normalizes the gradient and spaces the updates:
  // the engine's samples include loop and scheduling delays of the hosts,
  // hundreds of microseconds on a busy machine, that no queue causes.
  bool relative_to_base = false;
};

class Timely {
 public:
  Timely() = default;  // congestion control off: uncongested, never updated
  // params must outlive the Timely (one per Rpc, shared by its sessions).
  Timely(const TimelyParams& params, uint64_t now_ns)
      : params_(&params),
        rate_(params.link_bytes_per_s),
        last_update_ns_(now_ns),
        t_low_abs_ns_(params.t_low_ns) {}

  // One RTT sample, taken at now_ns. The bypass reads three members of the
  // session and no parameter: it runs for every sample of every
  // uncongested session.
  void on_rtt_sample(uint64_t now_ns, uint64_t rtt_ns) {
    if (rtt_ns < base_rtt_ns_) [[unlikely]]
      new_base(rtt_ns);
    if (uncongested_ && rtt_ns <= t_low_abs_ns_) return;
    update(now_ns, rtt_ns);
  }
  // A retransmission timeout: the session lost packets and no RTT sample
  // said so (Karn's rule takes none from a resent packet, and a session
  // whose every window loses a packet would never be sampled at all). The
  // rate is cut by loss_beta, as Swift cuts its window on a timeout; a
  // queue that overflows is the strongest signal a sender gets.
  // At most one cut per min_gap_ns (the session's RTO): timeouts of
  // several slots in one scan are one loss event.
  // Returns true when this timeout cut the rate (a new loss event).
  bool on_loss(uint64_t now_ns, uint64_t min_gap_ns) {
    if (cut_ns_ != 0 && now_ns - cut_ns_ < min_gap_ns) return false;
    rate_before_cut_ = rate_;
    set_rate(std::max(rate_ * (1 - params_->loss_beta), params_->min_bytes_per_s));
    last_update_ns_ = now_ns;
    cut_ns_ = now_ns;
    cuts_++;
    cut_undoable_ = true;
    return true;
  }
  // The last cut's timeouts were all spurious: the rate gets back what the
  // cut took, but not more than it had before it (RTT samples since may
  // have moved it either way; a decrease they made stays). Once per cut.
  // Returns whether it did (false: already undone).
  bool undo_loss() {
    if (!cut_undoable_) return false;
    cut_undoable_ = false;
    const double restored = std::min(rate_before_cut_, rate_ / (1 - params_->loss_beta));
    set_rate(std::min(std::max(rate_, restored), params_->link_bytes_per_s));
    return true;
  }
  // Cuts so far: the last one's number names its loss event (0: none yet).
  uint64_t cuts() const { return cuts_; }
  // True at the full rate: the session's packets need no pacing.
  bool uncongested() const { return uncongested_; }
  double rate_bytes_per_s() const { return rate_; }
  // The smallest RTT seen (relative_to_base); UINT64_MAX before a sample.
  uint64_t base_rtt_ns() const { return base_rtt_ns_; }
  // Nanoseconds one packet of `bytes` occupies at the current rate.
  uint64_t ns_for(size_t bytes) const {
    return static_cast<uint64_t>(static_cast<double>(bytes) * 1e9 / rate_);
  }

 private:
  void update(uint64_t now_ns, uint64_t rtt_ns);
  void set_rate(double rate) {
    rate_ = rate;
    uncongested_ = rate >= params_->link_bytes_per_s;
  }
  void new_base(uint64_t rtt_ns) {
    if (rtt_ns < params_->min_rtt_ns) return;  // an artefact (Timely::update)
    base_rtt_ns_ = rtt_ns;
    t_low_abs_ns_ = t_low();
  }
  bool relative() const { return params_->relative_to_base && base_rtt_ns_ != UINT64_MAX; }
  uint64_t t_low() const {
    return relative() ? base_rtt_ns_ + params_->t_low_ns : params_->t_low_ns;
  }
  uint64_t t_high() const {
    return relative() ? base_rtt_ns_ + params_->t_high_ns : params_->t_high_ns;
  }
  // What a gradient is measured against, and the spacing of full updates.
  double scale_ns() const {
    return static_cast<double>(relative() ? std::max(base_rtt_ns_, params_->min_rtt_ns)
                                          : params_->min_rtt_ns);
  }

  const TimelyParams* params_ = nullptr;
  double rate_ = 0;
  double prev_rtt_ns_ = 0;  // 0: no sample yet
  double avg_rtt_diff_ns_ = 0;
  size_t neg_gradients_ = 0;
  uint64_t last_update_ns_ = 0;
  uint64_t base_rtt_ns_ = UINT64_MAX;
  uint64_t cut_ns_ = 0;  // the last loss cut
  uint64_t cuts_ = 0;
  double rate_before_cut_ = 0;  // the rate the last cut cut
  bool cut_undoable_ = false;   // undo_loss() may still give it back
  bool uncongested_ = true;     // rate_ at the link rate (set_rate)
  uint64_t t_low_abs_ns_ = 0;   // t_low(), kept current by new_base()
};

}  // namespace rpc::detail
