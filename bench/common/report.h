// The result files of librpc's benchmarks (schema 2 of bench/compare/
// SCHEMA.md, written by tools/measure) and the checks that say when their
// numbers are not to be trusted.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/args.h"
#include "histogram.h"
#include "output.h"
#include "run_info.h"
#include "trust.h"

namespace bench {

// --json FILE and --csv FILE.
struct OutputPaths {
  std::string json;
  std::string csv;
};
void add_output_options(CLI::App& app, OutputPaths& out);

// The settings a run used, as its result file's "config": mode, transport,
// the effective RpcConfig (mtu_bytes, session_credits, bulk_threshold_bytes,
// congestion_control and its parameters, rto_us) and NexusConfig timeouts,
// and the transport's own options (udp_offload; fabric_provider;
// verbs_device, gid_index, verbs_bulk).
measure::Json endpoint_config(const EndpointOptions& ep);

// Run metadata and trust checks of one program run. Create it right before
// the measurement (it samples the load average and the command line).
class RunChecks {
 public:
  // busy_cores: the cores this run busy-polls (load_threshold()).
  explicit RunChecks(int busy_cores);

  // Around one measured point; point_end() checks the context switches
  // since point_begin(), the retransmissions and, given a histogram of
  // round trips, the gap between its max and p99, and prints each warning
  // (below the point's numbers, so without `label`; the result file's
  // copy starts with "label: " when label is not empty, e.g. "size 32 B").
  void point_begin();
  void point_end(std::string_view label, std::uint64_t retransmissions,
                 const measure::Histogram* rtt = nullptr);
  // After the last point: samples and checks the load average; prints.
  void finish();

  // A result file of system "librpc" carrying run() and warnings().
  measure::ResultFile result_file(std::string transport, std::string workload, std::string setup,
                                  measure::Json config) const;

  const measure::RunInfo& run() const { return run_; }

 private:
  measure::RunInfo run_;
  int busy_cores_;
  measure::ContextSwitches switches_;
  std::vector<std::string> labelled_;  // the result file's copies
};

// values, each rounded to `decimals` digits, as a JSON array.
measure::Json rounded(const std::vector<double>& values, int decimals = 1);

// Writes each of the paths that is set.
void write_outputs(const OutputPaths& out, const measure::ResultFile& file);

}  // namespace bench
