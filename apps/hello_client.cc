// hello_client: connects to hello_server's Rpc 0, prints its answer, then
// measures round-trip latency of 32-byte requests, one outstanding at a time,
// and says when the percentiles are not to be trusted (tools/measure/trust.h:
// retransmissions, a busy machine, the process descheduled, a lone outlier).
//
//   librpc-hello-client [--server HOST:PORT] [--uri HOST:PORT] [--count N]
//                       [--transport udp|verbs|fabric]
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <string_view>

#include "app_common.h"
#include "cli.h"
#include "histogram.h"
#include "librpc/rpc_all.h"
#include "run_info.h"
#include "trust.h"

namespace {

constexpr rpc::ReqType kHelloReqType = 1;
constexpr rpc::RpcId kServerRpcId = 0;
constexpr size_t kReqBytes = 32;
// Backstops; a healthy loopback round trip takes tens of microseconds.
constexpr auto kConnectBackstop = std::chrono::seconds(10);
constexpr auto kRequestTimeout = std::chrono::seconds(5);

struct Options {
  std::string server = "127.0.0.1:31850";
  std::string uri;  // empty: the local address that routes to the server, port 0
  uint64_t count = 1000;
  app::TransportOptions transport;
};

// The busy-polling thread: this one.
constexpr int kBusyCores = 1;

int run(const Options& opt, measure::RunInfo& run_info) {
  std::string uri = opt.uri;
  if (uri.empty()) {
    auto local = app::local_address_towards(opt.server);
    if (!local) {
      fmt::print(stderr, "hello_client: {}; give --uri\n", local.error());
      return app::kExitFailure;
    }
    uri = *local + ":0";  // port 0: ephemeral
  }
  rpc::Nexus nexus(rpc::NexusConfig{.uri = uri});
  rpc::Rpc rpc(nexus, opt.transport.rpc_config(0));
  // The Nexus gives up after its sm_timeout_ms, with the reason; the
  // timeout here is only a backstop.
  auto sn = rpc.connect(opt.server, kServerRpcId, kConnectBackstop);
  if (!sn) {
    fmt::print(stderr, "hello_client: cannot connect to rpc {} at {}: {}\n", kServerRpcId,
               opt.server, sn.error());
    return app::kExitFailure;
  }

  rpc::OwnedBuffer req(rpc, kReqBytes);
  rpc::OwnedBuffer resp(rpc, rpc.max_data_per_pkt());
  if (!req.valid() || !resp.valid()) {
    fmt::print(stderr, "hello_client: cannot allocate message buffers\n");
    return app::kExitFailure;
  }
  std::fill_n(req.data(), req.size(), uint8_t{'x'});

  const rpc::CallResult first = rpc::call_sync(rpc, *sn, kHelloReqType, req, resp, kRequestTimeout);
  if (!first.ok()) {
    fmt::print(stderr, "hello_client: request to {} failed: {}\n", opt.server,
               rpc::to_string(first.errc));
    return app::kExitFailure;
  }
  const std::string_view text(reinterpret_cast<const char*>(resp.data()), first.resp_size);
  fmt::print("hello_client connected to {} from {}; response: \"{}\"\n", opt.server, nexus.uri(),
             text);

  using Clock = std::chrono::steady_clock;
  measure::Histogram rtt;
  measure::ContextSwitches context_switches;
  context_switches.start();
  const uint64_t retransmissions_before = rpc.stats().retransmissions;
  const auto start = Clock::now();
  for (uint64_t i = 0; i < opt.count; i++) {
    const auto t0 = Clock::now();
    const rpc::CallResult r = rpc::call_sync(rpc, *sn, kHelloReqType, req, resp, kRequestTimeout);
    const auto t1 = Clock::now();
    if (!r.ok()) {
      fmt::print(stderr, "hello_client: request {} of {} failed: {}\n", i + 1, opt.count,
                 rpc::to_string(r.errc));
      return app::kExitFailure;
    }
    rtt.record(static_cast<uint64_t>(std::chrono::nanoseconds(t1 - t0).count()));
  }
  const double elapsed_s = std::chrono::duration<double>(Clock::now() - start).count();
  context_switches.stop();
  run_info.finish();
  const uint64_t retransmissions = rpc.stats().retransmissions - retransmissions_before;

  fmt::print(
      "{}-byte RPC round trip over {}: p50 {:.1f} us, p99 {:.1f} us, max {:.1f} us "
      "({} requests, {:.0f} requests/s)\n",
      kReqBytes, rpc.transport_name(), rtt.percentile_us(50), rtt.percentile_us(99),
      static_cast<double>(rtt.max_ns()) / 1e3, opt.count,
      static_cast<double>(opt.count) / elapsed_s);
  // Each reason the percentiles above may not show the network.
  measure::Warnings warnings;
  warnings.add_and_print(measure::check_retransmissions(retransmissions));
  warnings.add_and_print(measure::check_load(run_info, kBusyCores));
  warnings.add_and_print(measure::check_context_switches(context_switches.count()));
  warnings.add_and_print(measure::check_tail_gap(rtt));
  if (!warnings.list().empty()) fmt::print("  (the percentiles above are not trustworthy)\n");
  return app::kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  measure::RunInfo run_info(argc, argv);  // the load average at the start
  CLI::App cli(
      "Connects to hello_server's Rpc 0, prints its answer, then times 32-byte round trips.",
      "librpc-hello-client");
  Options opt;
  cli.add_option("--server", opt.server, "hello_server's address HOST:PORT")->capture_default_str();
  cli.add_option("--uri", opt.uri,
                 "this client's Nexus address HOST:PORT (default: the local address that routes "
                 "to the server, port 0)");
  cli.add_option("--count", opt.count, "round trips to time")
      ->check(CLI::Range(uint64_t{1}, uint64_t{100'000'000}))
      ->capture_default_str();
  app::add_transport_options(cli, opt.transport);
  if (auto status = measure::parse_command_line(cli, argc, argv)) return *status;

  app::install_stop_signals();
  try {
    return run(opt, run_info);
  } catch (const rpc::Error& e) {
    fmt::print(stderr, "hello_client: {}\n", e.what());
    return app::kExitFailure;
  }
}
