// Writing result files (bench/compare/SCHEMA.md, schema 2): a pretty JSON
// object with its keys in a fixed order, and optionally a CSV table with one
// row per result.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "histogram.h"
#include "run_info.h"

namespace measure {

// Keeps keys in insertion order, so files read in the order they are built.
using Json = nlohmann::ordered_json;

// x rounded to `decimals` digits (result files carry no false precision).
double round_to(double x, int decimals = 3);

// Adds the round-trip latency fields of schema 2 to a result object:
// rtt_p50_us, rtt_p90_us, rtt_p99_us, rtt_p999_us, rtt_p9999_us,
// rtt_min_us, rtt_max_us, rtt_mean_us, and with_cdf: rtt_cdf, an array of
// [value_us, quantile] pairs (Histogram::cdf_us).
void add_rtt_fields(Json& result, const Histogram& h, bool with_cdf = true);

// The console header and row for the same numbers: "rtt p50 ... rtt max"
// in microseconds, 10 characters a column.
std::string rtt_header();
std::string rtt_row(const Histogram& h);
// The line a latency program prints once, before its table.
inline constexpr std::string_view kRttNote =
    "latencies are round trips (request sent to response received), in microseconds; "
    "perftest, ucx_perftest and fabtests report one-way latency: half of that";

// A result file.
struct ResultFile {
  std::string system = "librpc";  // or the baseline's name
  std::string transport;
  std::string workload;          // "latency", "rate", "goodput", "sessions", ...
  std::string setup;             // free text: where each side ran, pinning, batch
  Json run;                      // RunInfo::to_json(); its schema_version is not repeated
  Json config = Json::object();  // the settings the run used
  std::vector<std::string> warnings;
  Json results = Json::array();  // one object per measured point
};

// {"schema_version", "system", "transport", "workload", "setup", "run",
//  "config", "warnings", "results"}.
Json to_json(const ResultFile& file);

// Writes to_json(file), pretty-printed. Throws std::runtime_error.
void write_json(const std::string& path, const ResultFile& file);

// Writes one header row and one row per result: the columns system,
// transport, workload, git_rev, then every scalar field of the results in
// order of first appearance (arrays and objects are left out; a result
// without a field leaves its cell empty). Throws std::runtime_error.
void write_csv(const std::string& path, const ResultFile& file);

// Both, for each path that is not empty.
void write_outputs(const std::string& json_path, const std::string& csv_path,
                   const ResultFile& file);

}  // namespace measure
