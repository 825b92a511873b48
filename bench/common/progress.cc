// Progress lines for long benchmark runs.
#include "common/progress.h"

#include <fmt/core.h>

#include <cstdio>

namespace bench {

Progress::Progress(std::string_view program, Clock::time_point start, bool enabled,
                   Clock::duration period)
    : program_(program),
      start_(start),
      next_(enabled ? start + period : Clock::time_point::max()),
      period_(period) {}

bool Progress::due(Clock::time_point now) {
  if (now < next_) return false;
  // Skip periods missed while the caller was busy rather than printing a
  // burst of catch-up lines.
  while (next_ <= now) next_ += period_;
  return true;
}

void Progress::print(Clock::time_point now, std::string_view text) const {
  const double elapsed_s = std::chrono::duration<double>(now - start_).count();
  fmt::print("{}: {:.0f} s: {}\n", program_, elapsed_s, text);
  std::fflush(stdout);
}

}  // namespace bench
