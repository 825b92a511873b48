// librpc large-message goodput benchmark, after eRPC's large_rpc_tput: one
// client session keeps a window of large requests outstanding (each
// continuation re-enqueues its request at once); the server answers each
// with a small response. The result is request payload Gbit/s per message
// size.
//
//   large_rpc_tput [--sizes 4K,1M,...] [--window W] [--resp-size B] ...
//       both mode (default): server and client threads in this process, one
//       Nexus on 127.0.0.1 (or --server-uri), each pinned to a CPU of its
//       own, both busy-polling
//   large_rpc_tput --mode server --server-uri HOST:PORT
//       serves at rpc_id 0 until SIGINT/SIGTERM
//   large_rpc_tput --mode client --server-uri HOST:PORT ...
//
// Each size gets a fresh client Rpc and session, a short warmup and then
// --duration seconds of measurement. Only completions with Errc::kOk and a
// response of the asked size count; any failed request makes the exit
// status 1. gbps counts request payload bytes only.
//
// By default the server's handler reads only the request's first 4 bytes
// (the response size it is asked for). With --server-reads-all it reads
// every byte (bench::kChecksumType: a checksum of the whole request comes
// back in the response and the client checks it), so that a transport which
// could hand a request over in place, without the payload crossing to the
// server's memory, gets no goodput for bytes nobody reads. The server needs
// no option for it: every benchmark server serves both request types.
//
// With --pool-reads the server answers each request with a value of a
// pool it keeps (bench::kPoolReadType: a KV server's GET, --resp-size bytes,
// copied from the pool into a MsgBuffer); with --app-memory the pool is
// registered with the server's Rpc and each response is a view of it
// (bench::kPoolViewType: no copy). Goodput then counts response bytes:
//
//   large_rpc_tput --sizes 64 --resp-size 1M --pool-reads [--app-memory]
//
// Why the default window is 2: with one request outstanding the link idles
// for a round trip after every message, between the last request packet
// and the next request's first; a second request fills that gap. More
// requests add little, since a session's credits (packets in flight, 64 by default) are
// shared by all of its requests; --window 1 and 4 measure it.

#include <fmt/core.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/args.h"
#include "common/client_threads.h"
#include "common/connect.h"
#include "common/cpu.h"
#include "common/handlers.h"
#include "common/program.h"
#include "common/report.h"
#include "common/server_threads.h"
#include "librpc/rpc_all.h"

namespace {

using bench::Mode;
using bench::RunError;

constexpr std::string_view kProgram = "large_rpc_tput";
constexpr rpc::RpcId kServerRpcId = 0;
const std::vector<std::size_t> kDefaultSizes = {4 << 10, 16 << 10, 64 << 10, 256 << 10,
                                                1 << 20, 4 << 20,  8 << 20};
constexpr std::size_t kDefaultWindow = 2;
constexpr std::size_t kDefaultRespSize = 32;
constexpr std::size_t kMaxWindow = 64;
// Per size: the default sweep then takes about 15 s, and even 8 MiB
// messages complete dozens of times per point.
constexpr double kDefaultDurationS = 2;
// The largest message field of the wire header is 24 bits.
constexpr std::size_t kMaxSize = (1 << 24) - 1;

struct Options {
  bench::EndpointOptions ep;
  std::vector<std::size_t> sizes = kDefaultSizes;
  std::size_t window = kDefaultWindow;
  std::size_t resp_size = kDefaultRespSize;
  bool server_reads_all = false;
  bool pool_reads = false;
  bool app_memory = false;
  double duration_s = kDefaultDurationS;
  bench::OutputPaths out;
};

void add_options(CLI::App& app, Options& opt) {
  bench::configure_app(app);
  app.footer(
      "Both mode runs server and client threads in this process, each pinned to its own CPU, "
      "busy-polling; server and client mode do not pin (place them with taskset -c).");
  bench::add_endpoint_options(app, opt.ep);
  CLI::App& client = *app.add_option_group("Client", "The measurement (client and both mode)");
  measure::add_sizes_option(client, "--sizes", opt.sizes,
                            fmt::format("request sizes, K/M suffixes allowed; at least {} B",
                                        bench::kSizedRespHeaderBytes),
                            bench::kSizedRespHeaderBytes, kMaxSize)
      ->default_str("4K,16K,64K,256K,1M,4M,8M");
  client.add_option("--window", opt.window, "outstanding requests on the session")
      ->check(CLI::Range(std::size_t{1}, kMaxWindow));
  measure::add_size_option(client, "--resp-size", opt.resp_size, "response size", 0, kMaxSize);
  client.add_flag("--server-reads-all", opt.server_reads_all,
                  "the server's handler reads every request byte (a checksum of the request, "
                  "returned in the response and checked); default: it reads the first 4 bytes");
  client.add_flag("--pool-reads", opt.pool_reads,
                  "the server answers with --resp-size bytes of a value pool it keeps, copied "
                  "into a MsgBuffer; goodput counts response bytes");
  client.add_flag("--app-memory", opt.app_memory,
                  "like --pool-reads, but the pool is registered application memory and each "
                  "response a view of it (no copy)");
  client
      .add_option("--duration", opt.duration_s,
                  "measured time per size, after a warmup of a tenth of it (at most 0.5 s)")
      ->check(measure::positive_double())
      ->type_name("SECONDS");
  bench::add_output_options(client, opt.out);
}

void check_options(const Options& opt, const CLI::App& app) {
  bench::check_endpoint_options(
      opt.ep, bench::any_given(*app.get_option_group("Client")),
      "--sizes/--window/--resp-size/--server-reads-all/--pool-reads/--app-memory/--duration/"
      "--json/--csv");
  if ((opt.pool_reads || opt.app_memory) && opt.server_reads_all) {
    throw bench::UsageError("--server-reads-all does not go with --pool-reads/--app-memory");
  }
}

bool pool_reads(const Options& opt) { return opt.pool_reads || opt.app_memory; }

rpc::ReqType req_type(const Options& opt) {
  if (opt.app_memory) return bench::kPoolViewType;
  if (opt.pool_reads) return bench::kPoolReadType;
  return opt.server_reads_all ? bench::kChecksumType : bench::kSizedRespType;
}

std::string_view handler_reads(const Options& opt) {
  if (opt.app_memory) {
    return "server answers from a pool of registered application memory (a view, no copy); "
           "goodput counts response bytes";
  }
  if (opt.pool_reads) {
    return "server answers from a pool it copies into a MsgBuffer; goodput counts response "
           "bytes";
  }
  return opt.server_reads_all ? "server handler reads every request byte (checksum returned)"
                              : "server handler reads the first 4 request bytes";
}

double to_gbps(double messages_per_s, std::size_t size) {
  return messages_per_s * static_cast<double>(size) * 8 / 1e9;
}

void print_plan(const Options& opt) {
  std::string sizes;
  for (const std::size_t s : opt.sizes) sizes += (sizes.empty() ? "" : ",") + bench::format_size(s);
  fmt::print(
      "large_rpc_tput: transport {}, mtu {}, 1 session, window {}, {} B responses, sizes {}, "
      "{} s measured per size, {}\n",
      opt.ep.transport, bench::mtu_name(opt.ep.mtu), opt.window, opt.resp_size, sizes,
      opt.duration_s, handler_reads(opt));
  std::fflush(stdout);
}

// One message size: a client thread with one session to rpc 0 at
// server_uri, measured, stopped. Prints the line; returns the JSON result
// and adds to *failures the failed requests, and 1 if requests were left
// unanswered at the end.
measure::Json run_size(const Options& opt, std::size_t size, rpc::Nexus& nexus,
                       const std::string& server_uri, rpc::RpcId client_id,
                       const std::vector<int>& cpus, bench::ServerThreads* servers,
                       std::uint64_t* failures, bench::RunChecks& checks) {
  checks.point_begin();
  bench::ClientThreadsConfig c;
  c.ep = opt.ep;
  c.server_uri = server_uri;
  c.first_id = client_id;
  c.load = {.req_type = req_type(opt),
            .req_size = size,
            .resp_size = opt.resp_size,
            .window = opt.window};
  c.cpus = cpus;
  bench::ClientThreads client(nexus, c);
  const bench::Window w = bench::measure_then_stop(
      kProgram, client, servers, std::min(0.5, opt.duration_s / 10), opt.duration_s,
      [payload = pool_reads(opt) ? opt.resp_size : size](double per_s) {
        return fmt::format("{:.3f} Gbit/s", to_gbps(per_s, payload));
      });

  const std::uint64_t messages = w.client_completed[0];
  const std::size_t payload = pool_reads(opt) ? opt.resp_size : size;
  const double gbps = to_gbps(static_cast<double>(messages) / w.seconds, payload);
  const auto& f = client.final_state(0);
  *failures += client.errors(0) + (f.drained ? 0 : 1);
  fmt::print(
      "librpc size={} window={} messages={} in {:.2f} s: {:.3f} Gbit/s{}{}{}{}{}{}\n",
      bench::format_size(size), opt.window, messages, w.seconds, gbps,
      client.errors(0) ? fmt::format(" errors={} (first: {})", client.errors(0), f.first_error)
                       : "",
      f.retransmissions ? fmt::format(" retransmissions={} (spurious {})", f.retransmissions,
                                      f.spurious_retransmissions)
                        : "",
      f.cc_paced_pkts ? fmt::format(" paced={} (rate {} Mbit/s at the end)", f.cc_paced_pkts,
                                    f.cc_min_rate_mbps)
                      : "",
      f.cc_timeout_cuts
          ? fmt::format(" timeout cuts={} (undone {})", f.cc_timeout_cuts, f.cc_timeout_cuts_undone)
          : "",
      f.drained ? "" : " (requests left unanswered at the end)",
      w.interrupted ? " (interrupted)" : "");
  std::fflush(stdout);
  checks.point_end(fmt::format("size {}", bench::format_size(size)), f.retransmissions);
  measure::Json o;
  o["size"] = size;
  o["window"] = opt.window;
  o["duration_s"] = measure::round_to(w.seconds);
  o["messages"] = messages;
  o["gbps"] = measure::round_to(gbps);
  o["resp_size"] = opt.resp_size;
  o["errors"] = client.errors(0);
  o["retransmissions"] = f.retransmissions;
  o["spurious_retransmissions"] = f.spurious_retransmissions;
  o["cc_paced_pkts"] = f.cc_paced_pkts;
  o["cc_timeout_cuts"] = f.cc_timeout_cuts;
  o["cc_timeout_cuts_undone"] = f.cc_timeout_cuts_undone;
  o["interrupted"] = w.interrupted;
  return o;
}

// Runs every size (until a stop signal), then writes the JSON.
int run_sizes(const Options& opt, const std::string& setup, rpc::Nexus& nexus,
              const std::string& server_uri, rpc::RpcId client_id, const std::vector<int>& cpus,
              bench::ServerThreads* servers) {
  fmt::print("large_rpc_tput: {}\n", setup);
  print_plan(opt);
  // Busy-polling: the client thread, and the server's in both mode.
  bench::RunChecks checks(servers != nullptr ? 2 : 1);
  measure::Json results = measure::Json::array();
  std::uint64_t failures = 0;
  for (const std::size_t size : opt.sizes) {
    if (bench::stop_requested()) break;
    results.push_back(
        run_size(opt, size, nexus, server_uri, client_id, cpus, servers, &failures, checks));
  }
  if (servers != nullptr) {
    servers->stop();
    // The client counts a retransmission as spurious only when both copies
    // are answered. A server still reading (bulk) or handling the first
    // copy drops the second unanswered (busy), so those show only here, on
    // the server: every size of the run and its warmups together.
    const rpc::RpcStats& s = servers->final_stats(0);
    fmt::print(
        "librpc server: {} request packets dropped as busy (copies of a request still being read "
        "or handled), {} duplicates answered from the response cache (all sizes, warmups "
        "included)\n",
        s.drops.busy, s.duplicate_requests);
  }
  checks.finish();
  measure::Json config = bench::endpoint_config(opt.ep);
  config["server_reads_all"] = opt.server_reads_all;
  config["pool_reads"] = pool_reads(opt);
  config["app_memory"] = opt.app_memory;
  measure::ResultFile file =
      checks.result_file(opt.ep.transport, "goodput",
                         fmt::format("{}; {}", setup, handler_reads(opt)), std::move(config));
  file.results = std::move(results);
  bench::write_outputs(opt.out, file);
  return failures == 0 ? 0 : 1;
}

int run_server_mode(const Options& opt) {
  rpc::Nexus nexus(bench::make_nexus_config(opt.ep, *opt.ep.server_uri));
  bench::register_bench_handlers(nexus);
  bench::install_stop_signals();
  // Not pinned: a client on the same host would pin onto the same CPU.
  bench::ServerThreads server(nexus, opt.ep, 1, kServerRpcId, /*cpus=*/{});
  fmt::print(
      "large_rpc_tput server: rpc {} on {} (transport {}, mtu {}), not pinned, busy-polling, "
      "handlers in the event loop; Ctrl-C to stop\n",
      kServerRpcId, nexus.uri(), opt.ep.transport, bench::mtu_name(opt.ep.mtu));
  std::fflush(stdout);
  const std::uint64_t served = bench::serve_until_stopped(kProgram, server, /*progress=*/true);
  fmt::print("large_rpc_tput server: stopping after {} requests\n", served);
  return 0;
}

int run_client_mode(const Options& opt) {
  rpc::Nexus nexus(bench::make_nexus_config(opt.ep, bench::client_nexus_uri(opt.ep)));
  bench::install_stop_signals();
  const std::string setup =
      fmt::format("client mode on {} against rpc {} at {}: client thread not pinned, busy-polling",
                  nexus.uri(), kServerRpcId, *opt.ep.server_uri);
  return run_sizes(opt, setup, nexus, *opt.ep.server_uri, 0, /*cpus=*/{}, nullptr);
}

int run_both_mode(const Options& opt) {
  const bench::CpuPlan plan = bench::plan_cpus(1, 1);
  // The Nexus (and its session-management thread) is created on this
  // thread, which is never pinned: it only sleeps and prints.
  rpc::Nexus nexus(bench::make_nexus_config(opt.ep, opt.ep.server_uri.value_or("127.0.0.1:0")));
  bench::register_bench_handlers(nexus);
  bench::install_stop_signals();
  bench::ServerThreads server(nexus, opt.ep, 1, kServerRpcId, plan.server_cpus);
  const std::string setup = fmt::format(
      "both mode on {}: server Rpc thread {}, client thread {}, both busy-polling", nexus.uri(),
      server.all_pinned() ? "pinned to " + bench::describe_cpus(plan.server_cpus) : "NOT pinned",
      plan.client_cpus.empty() ? "NOT pinned"
                               : "pinned to " + bench::describe_cpus(plan.client_cpus));
  return run_sizes(opt, setup, nexus, nexus.uri(), kServerRpcId + 1, plan.client_cpus, &server);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("librpc goodput by message size, after eRPC's large_rpc_tput",
               std::string(kProgram));
  Options opt;
  add_options(app, opt);
  return bench::run_main(app, argc, argv, [&] {
    check_options(opt, app);
    if (opt.ep.mode == Mode::kServer) return run_server_mode(opt);
    if (opt.ep.mode == Mode::kClient) return run_client_mode(opt);
    return run_both_mode(opt);
  });
}
