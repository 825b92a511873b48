#include "common/report.h"

#include <fmt/core.h>

#include "cli.h"  // tools/measure
#include "common/connect.h"
#include "common/program.h"

namespace bench {
namespace {

std::string verbs_bulk_name(rpc::VerbsBulk bulk) {
  switch (bulk) {
    case rpc::VerbsBulk::kRc:
      return "rc";
    case rpc::VerbsBulk::kDc:
      return "dc";
    case rpc::VerbsBulk::kOff:
      return "off";
    case rpc::VerbsBulk::kAuto:
      break;
  }
  return "auto";
}

}  // namespace

void add_output_options(CLI::App& app, OutputPaths& out) {
  measure::add_output_options(app, out.json, out.csv);
}

measure::Json endpoint_config(const EndpointOptions& ep) {
  const rpc::RpcConfig rc = make_rpc_config(ep, 0, nullptr);
  const rpc::NexusConfig nc = make_nexus_config(ep, "");
  measure::Json c;
  c["mode"] = std::string(mode_name(ep.mode));
  c["transport"] = rc.transport;
  c["mtu_bytes"] = rc.mtu_bytes;  // 0: the transport's own
  c["session_credits"] = rc.session_credits;
  c["bulk_threshold_bytes"] = rc.bulk_threshold_bytes;
  c["congestion_control"] = rc.congestion_control;
  c["cc_link_gbps"] = rc.cc_link_gbps;
  c["cc_t_low_us"] = rc.cc_t_low_us;
  c["cc_t_high_us"] = rc.cc_t_high_us;
  c["rto_us"] = rc.rto_us;
  c["sm_timeout_ms"] = nc.sm_timeout_ms;
  c["failure_timeout_ms"] = nc.failure_timeout_ms;
  if (rc.transport == "udp") c["udp_offload"] = rc.udp_offload;
  if (rc.transport == "fabric") c["fabric_provider"] = rc.fabric_provider;
  if (rc.transport == "verbs") {
    c["verbs_device"] = rc.verbs_device;
    c["gid_index"] = rc.verbs_gid_index;
    c["verbs_bulk"] = verbs_bulk_name(rc.verbs_bulk);
  }
  return c;
}

RunChecks::RunChecks(int busy_cores)
    : run_(command_line().argc, command_line().argv), busy_cores_(busy_cores) {
  switches_.start();
}

void RunChecks::point_begin() { switches_.start(); }

void RunChecks::point_end(std::string_view label, std::uint64_t retransmissions,
                          const measure::Histogram* rtt) {
  switches_.stop();
  measure::Warnings point;
  point.add(measure::check_retransmissions(retransmissions));
  point.add(measure::check_context_switches(switches_.count()));
  if (rtt != nullptr) point.add(measure::check_tail_gap(*rtt));
  for (const std::string& w : point.list()) {
    fmt::print("  warning: {}\n", w);
    labelled_.push_back(label.empty() ? w : fmt::format("{}: {}", label, w));
  }
  std::fflush(stdout);
}

void RunChecks::finish() {
  run_.finish();
  if (const auto w = measure::check_load(run_, busy_cores_)) {
    fmt::print("  warning: {}\n", *w);
    labelled_.push_back(*w);
  }
  std::fflush(stdout);
}

measure::ResultFile RunChecks::result_file(std::string transport, std::string workload,
                                           std::string setup, measure::Json config) const {
  measure::ResultFile file;
  file.transport = std::move(transport);
  file.workload = std::move(workload);
  file.setup = std::move(setup);
  file.run = run_.to_json();
  file.config = std::move(config);
  file.warnings = labelled_;
  return file;
}

measure::Json rounded(const std::vector<double>& values, int decimals) {
  measure::Json a = measure::Json::array();
  for (double v : values) a.push_back(measure::round_to(v, decimals));
  return a;
}

void write_outputs(const OutputPaths& out, const measure::ResultFile& file) {
  measure::write_outputs(out.json, out.csv, file);
}

}  // namespace bench
