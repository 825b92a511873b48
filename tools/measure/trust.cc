#include "trust.h"

#include <sys/resource.h>

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace measure {
namespace {

std::uint64_t involuntary_switches() {
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  return static_cast<std::uint64_t>(usage.ru_nivcsw);
}

}  // namespace

std::optional<std::string> check_load(const RunInfo& run, int busy_cores) {
  // The thread that sampled procs_running was running: it is not "other".
  const int others = std::max(run.runnable_start, run.runnable_end) - 1;
  const int free_cpus = std::max(0, run.cpus - busy_cores);
  if (others <= free_cpus) return std::nullopt;
  return fmt::format(
      "machine busy: {} other threads runnable, {} cpus left beside this run's {} busy-polling",
      others, free_cpus, busy_cores);
}

void ContextSwitches::start() { start_ = stop_ = involuntary_switches(); }
void ContextSwitches::stop() { stop_ = std::max(start_, involuntary_switches()); }

std::optional<std::string> check_context_switches(std::uint64_t count, std::uint64_t threshold) {
  if (count <= threshold) return std::nullopt;
  return fmt::format("descheduled {} times", count);
}

std::optional<std::string> check_retransmissions(std::uint64_t n) {
  if (n == 0) return std::nullopt;
  return fmt::format("{} retransmissions: the tail includes RTO waits", n);
}

std::optional<std::string> check_tail_gap(const Histogram& h, std::uint64_t gap_ns) {
  if (h.empty()) return std::nullopt;
  const std::uint64_t p99 = h.percentile_ns(99);
  if (h.max_ns() <= p99 || h.max_ns() - p99 <= gap_ns) return std::nullopt;
  return fmt::format(
      "largest sample {:.1f} us is {:.1f} us above p99 ({:.1f} us): a preemption "
      "or a loss",
      static_cast<double>(h.max_ns()) / 1e3, static_cast<double>(h.max_ns() - p99) / 1e3,
      static_cast<double>(p99) / 1e3);
}

bool Warnings::add(const std::optional<std::string>& w) {
  if (!w || std::find(list_.begin(), list_.end(), *w) != list_.end()) return false;
  list_.push_back(*w);
  return true;
}

void Warnings::add_and_print(const std::optional<std::string>& w, std::FILE* out) {
  if (add(w)) fmt::print(out, "  warning: {}\n", *w);
}

}  // namespace measure
