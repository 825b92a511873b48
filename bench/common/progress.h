// Progress lines for long benchmark runs: at most one per period, so that
// a run of many seconds shows it is alive (and how steady it is) without
// flooding the output of short runs.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

namespace bench {

using Clock = std::chrono::steady_clock;

// Runs shorter than this print no progress: they end before a line helps.
inline constexpr double kProgressMinRunS = 3.0;

class Progress {
 public:
  // Lines are due every `period` after `start`, and never when !enabled.
  Progress(std::string_view program, Clock::time_point start, bool enabled,
           Clock::duration period = std::chrono::seconds(1));

  // True when a line is due at `now`; the next one is then a period later.
  bool due(Clock::time_point now);
  // Prints "<program>: <seconds since start> s: <text>" and flushes.
  void print(Clock::time_point now, std::string_view text) const;
  // When the next line is due (time_point::max() when disabled).
  Clock::time_point next() const { return next_; }

 private:
  std::string program_;
  Clock::time_point start_;
  Clock::time_point next_;
  Clock::duration period_;
};

}  // namespace bench
