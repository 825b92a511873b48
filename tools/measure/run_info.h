// The metadata every result file carries (bench/compare/SCHEMA.md, "run"):
// which code ran, where, on what load, and how it was started.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace measure {

// The result files' schema; bench/compare/SCHEMA.md documents each version.
inline constexpr int kSchemaVersion = 2;

// Threads runnable now (ours included): the median of 5 samples of
// /proc/stat's procs_running, 1 ms apart; -1 when unreadable.
int runnable_threads();

// The 1-minute load average from /proc/loadavg; -1 when unreadable.
double load_average_1min();
// Processors online (at least 1).
int online_cpus();

class RunInfo {
 public:
  // Samples everything but the final load (average and runnable threads):
  // call it at the start of main(), before the measurement.
  RunInfo(int argc, char** argv);
  // Samples the final load: call it right after the measurement.
  void finish();

  // {"schema_version", "git_rev", "host", "kernel", "cpus", "cpu_model",
  //  "load_avg_start", "load_avg_end", "runnable_start", "runnable_end",
  //  "started_utc", "command"};
  // load_avg_end is null before finish().
  nlohmann::ordered_json to_json() const;

  std::string git_rev;  // "unknown" outside a git checkout
  std::string host;
  std::string kernel;
  int cpus = 1;
  std::string cpu_model;
  double load_avg_start = -1;
  double load_avg_end = -1;  // -1 until finish()
  // Threads runnable on the machine (ours included) right before and right
  // after the measurement: the median of a few /proc/stat procs_running
  // samples; -1 when unreadable or before finish().
  int runnable_start = -1;
  int runnable_end = -1;
  std::string started_utc;  // 2026-01-31T12:34:56Z
  std::string command;      // argv joined by spaces
  double started_monotonic_s = 0;
  double finished_monotonic_s = 0;
};

}  // namespace measure
