#include "cc/timely.h"

#include <algorithm>

namespace rpc::detail {

void Timely::update(uint64_t now_ns, uint64_t rtt_ns) {
  const TimelyParams& p = *params_;
  // A sample shorter than the minimum is a measurement artefact (a late
  // answer to a resent packet): it would swing the gradient.
  if (rtt_ns < p.min_rtt_ns) return;
  const double rtt = static_cast<double>(rtt_ns);
  const double rtt_diff = prev_rtt_ns_ == 0 ? 0 : rtt - prev_rtt_ns_;
  prev_rtt_ns_ = rtt;
  neg_gradients_ = rtt_diff < 0 ? neg_gradients_ + 1 : 0;
  avg_rtt_diff_ns_ = (1 - p.ewma_alpha) * avg_rtt_diff_ns_ + p.ewma_alpha * rtt_diff;

  // Updates closer together than the minimum RTT move the rate
  // proportionally less, so that a burst of samples is not a burst of steps.
  const double scale = scale_ns();
  const double since = static_cast<double>(now_ns - std::min(now_ns, last_update_ns_));
  const double delta = std::min(since / scale, 1.0);
  last_update_ns_ = now_ns;
  const double add = p.add_bytes_per_s * delta;
  const double md = p.beta * delta;

  const uint64_t t_high_ns = t_high();
  double rate;
  if (rtt_ns < t_low()) {
    rate = rate_ + add;
  } else if (rtt_ns > t_high_ns) {
    rate = rate_ * (1 - md * (1 - static_cast<double>(t_high_ns) / rtt));
  } else {
    const double gradient = avg_rtt_diff_ns_ / scale;
    if (gradient <= 0) {
      rate = rate_ + (neg_gradients_ >= p.hai_after ? 5 : 1) * add;
    } else {
      rate = rate_ * (1 - md * gradient);
    }
  }
  // Never below half in one step, nor outside [min, link].
  set_rate(std::clamp(std::max(rate, rate_ / 2), p.min_bytes_per_s, p.link_bytes_per_s));
}

}  // namespace rpc::detail
