// Checks that say when a run's numbers are not to be trusted. Each returns
// a human-readable warning, or nothing. Programs print each warning on its
// own line right after the numbers it concerns ("  warning: ...", see
// print_warnings) and list them in the result file's "warnings" array.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "histogram.h"
#include "run_info.h"

namespace measure {

// "machine busy: ..." when, right before or right after the run, other
// threads were runnable than fit on the cpus the run's busy_cores
// busy-polling threads leave free: runnable threads (/proc/stat
// procs_running, less the sampling thread itself) above cpus - busy_cores.
// The samples are taken outside the measurement, when the run's own
// polling threads are not running yet or any more; a local server process
// counts as other. The 1-minute load average is not used for this: it
// still counts a build that ended seconds before the run (the run info
// records it).
std::optional<std::string> check_load(const RunInfo& run, int busy_cores);

// Involuntary context switches of this process (all threads) between
// start() and stop(): a busy-polling thread that is switched out measures
// the scheduler, not the network.
class ContextSwitches {
 public:
  void start();
  void stop();
  std::uint64_t count() const { return stop_ - start_; }

 private:
  std::uint64_t start_ = 0;
  std::uint64_t stop_ = 0;
};
inline constexpr std::uint64_t kContextSwitchThreshold = 10;
// "descheduled N times" when count > threshold.
std::optional<std::string> check_context_switches(
    std::uint64_t count, std::uint64_t threshold = kContextSwitchThreshold);

// "N retransmissions: the tail includes RTO waits" when n > 0.
std::optional<std::string> check_retransmissions(std::uint64_t n);

// A largest sample far above p99 looks like a preemption or a lost packet:
// "largest sample X us is Y us above p99 (Z us): a preemption or a loss"
// when max - p99 exceeds gap_ns (default 1 ms).
inline constexpr std::uint64_t kTailGapNs = 1'000'000;
std::optional<std::string> check_tail_gap(const Histogram& h, std::uint64_t gap_ns = kTailGapNs);

// Collects warnings in order, without duplicates.
class Warnings {
 public:
  // Adds w if set; returns whether it did (false for a repeat).
  bool add(const std::optional<std::string>& w);
  // Adds w and prints "  warning: w" to out if it is new.
  void add_and_print(const std::optional<std::string>& w, std::FILE* out = stdout);
  const std::vector<std::string>& list() const { return list_; }

 private:
  std::vector<std::string> list_;
};

}  // namespace measure
