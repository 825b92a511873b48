// hello_client: connects to hello_server's Rpc 0, prints its answer, then
// measures round-trip latency of 32-byte requests, one outstanding at a time,
// and says when the percentiles are not to be trusted.
//
//   librpc-hello-client [--server HOST:PORT] [--uri HOST:PORT] [--count N]
//                       [--transport udp|verbs|fabric]
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "app_common.h"
#include "librpc/rpc_all.h"

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

// Nearest-rank percentile of sorted samples. REQUIRES: !sorted.empty().
double percentile(const std::vector<double>& sorted, double p) {
  const auto rank = static_cast<size_t>(std::ceil(p * static_cast<double>(sorted.size())));
  return sorted[std::clamp<size_t>(rank, 1, sorted.size()) - 1];
}

int run(const Options& opt) {
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
  std::vector<double> latencies_us;
  latencies_us.reserve(opt.count);
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
    latencies_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  const double elapsed_s = std::chrono::duration<double>(Clock::now() - start).count();
  const uint64_t retransmissions = rpc.stats().retransmissions - retransmissions_before;

  std::sort(latencies_us.begin(), latencies_us.end());
  fmt::print(
      "{}-byte RPC round trip over {}: p50 {:.1f} us, p99 {:.1f} us, max {:.1f} us "
      "({} requests, {:.0f} requests/s)\n",
      kReqBytes, rpc.transport_name(), percentile(latencies_us, 0.50),
      percentile(latencies_us, 0.99), latencies_us.back(), opt.count,
      static_cast<double>(opt.count) / elapsed_s);
  if (retransmissions != 0) {
    fmt::print("warning: not trustworthy: {} retransmissions during the run\n", retransmissions);
  }
  return app::kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
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
  if (const int status = app::parse_command_line(cli, argc, argv); status >= 0) return status;

  app::install_stop_signals();
  try {
    return run(opt);
  } catch (const rpc::Error& e) {
    fmt::print(stderr, "hello_client: {}\n", e.what());
    return app::kExitFailure;
  }
}
