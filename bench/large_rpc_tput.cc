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
// Why the default window is 2: with one request outstanding the link idles
// for a round trip after every message, between the last request packet
// and the next request's first; a second request fills that gap. More
// requests add little, since a session's 32 credits (packets in flight) are
// shared by all of its requests; --window 1 and 4 measure it.

#include <fmt/core.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/args.h"
#include "common/client_threads.h"
#include "common/connect.h"
#include "common/cpu.h"
#include "common/handlers.h"
#include "common/json.h"
#include "common/program.h"
#include "common/server_threads.h"
#include "librpc/rpc_all.h"

namespace {

using bench::Mode;
using bench::RunError;
using bench::UsageError;

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

void print_usage(std::FILE* out) {
  fmt::print(out,
             "usage: large_rpc_tput [--mode both|server|client] [options]\n"
             "\n"
             "  --mode M             both (default): server and client threads in this\n"
             "                       process, each pinned to its own CPU, busy-polling;\n"
             "                       server: serve at rpc_id 0 until SIGINT/SIGTERM;\n"
             "                       client: measure against rpc 0 at --server-uri;\n"
             "                       these two do not pin (place them with taskset -c)\n"
             "{}"
             "  --sizes A,B,...      request sizes, K/M suffixes allowed (default 4K,16K,64K,\n"
             "                       256K,1M,4M,8M); at least {} B\n"
             "  --window W           outstanding requests on the session (default {})\n"
             "  --resp-size BYTES    response size (default {})\n"
             "  --duration SECONDS   measured time per size (default {}), after a warmup\n"
             "                       of a tenth of it (at most 0.5 s)\n"
             "  --json FILE          also write the results as JSON to FILE\n"
             "  -h, --help           show this help\n",
             bench::endpoint_usage(), bench::kSizedRespHeaderBytes, kDefaultWindow,
             kDefaultRespSize, kDefaultDurationS);
}

struct Options {
  bench::EndpointOptions ep;
  std::vector<std::size_t> sizes = kDefaultSizes;
  std::size_t window = kDefaultWindow;
  std::size_t resp_size = kDefaultRespSize;
  double duration_s = kDefaultDurationS;
  std::optional<std::string> json;
  bool help = false;
};

Options parse_args(int argc, char** argv) {
  static constexpr std::string_view kValued[] = {
      "--sizes", "--window", "--resp-size", "--duration", "--json",
  };
  Options opt;
  bool client_flag_given = false;
  for (const bench::Flag& f : bench::split_flags(argc, argv, kValued, {})) {
    if (f.name == "--help") {
      opt.help = true;
      return opt;
    }
    if (bench::apply_endpoint_flag(opt.ep, f)) continue;
    client_flag_given = true;
    if (f.name == "--sizes") {
      opt.sizes = bench::parse_sizes(f.name, f.value, kMaxSize);
      for (const std::size_t s : opt.sizes) {
        if (s < bench::kSizedRespHeaderBytes) {
          throw UsageError(fmt::format("--sizes: {} B is below the minimum of {} B", s,
                                       bench::kSizedRespHeaderBytes));
        }
      }
    } else if (f.name == "--window") {
      opt.window = bench::parse_unsigned(f.name, f.value, 1, kMaxWindow);
    } else if (f.name == "--resp-size") {
      opt.resp_size = bench::parse_size(f.name, f.value, kMaxSize);
    } else if (f.name == "--duration") {
      opt.duration_s = bench::parse_positive_double(f.name, f.value);
    } else if (f.name == "--json") {
      opt.json = bench::parse_path(f.name, f.value);
    }
  }
  bench::check_endpoint_options(opt.ep, client_flag_given,
                                "--sizes/--window/--resp-size/--duration/--json");
  return opt;
}

double to_gbps(double messages_per_s, std::size_t size) {
  return messages_per_s * static_cast<double>(size) * 8 / 1e9;
}

void print_plan(const Options& opt) {
  std::string sizes;
  for (const std::size_t s : opt.sizes) sizes += (sizes.empty() ? "" : ",") + bench::format_size(s);
  fmt::print(
      "large_rpc_tput: transport {}, mtu {}, 1 session, window {}, {} B responses, sizes {}, "
      "{} s measured per size\n",
      opt.ep.transport, bench::mtu_name(opt.ep.mtu), opt.window, opt.resp_size, sizes,
      opt.duration_s);
  std::fflush(stdout);
}

// One message size: a client thread with one session to rpc 0 at
// server_uri, measured, stopped. Prints the line; returns the JSON result
// and adds to *failures the failed requests, and 1 if requests were left
// unanswered at the end.
bench::JsonObject run_size(const Options& opt, std::size_t size, rpc::Nexus& nexus,
                           const std::string& server_uri, rpc::RpcId client_id,
                           const std::vector<int>& cpus, bench::ServerThreads* servers,
                           std::uint64_t* failures) {
  bench::ClientThreadsConfig c;
  c.ep = opt.ep;
  c.server_uri = server_uri;
  c.first_id = client_id;
  c.load = {.req_type = bench::kSizedRespType,
            .req_size = size,
            .resp_size = opt.resp_size,
            .window = opt.window};
  c.cpus = cpus;
  bench::ClientThreads client(nexus, c);
  const bench::Window w = bench::measure_then_stop(
      kProgram, client, servers, std::min(0.5, opt.duration_s / 10), opt.duration_s,
      [size](double per_s) { return fmt::format("{:.3f} Gbit/s", to_gbps(per_s, size)); });

  const std::uint64_t messages = w.client_completed[0];
  const double gbps = to_gbps(static_cast<double>(messages) / w.seconds, size);
  const auto& f = client.final_state(0);
  *failures += client.errors(0) + (f.drained ? 0 : 1);
  fmt::print("librpc size={} window={} messages={} in {:.2f} s: {:.3f} Gbit/s{}{}{}{}{}\n",
             bench::format_size(size), opt.window, messages, w.seconds, gbps,
             client.errors(0)
                 ? fmt::format(" errors={} (first: {})", client.errors(0), f.first_error)
                 : "",
             f.retransmissions ? fmt::format(" retransmissions={} (spurious {})", f.retransmissions,
                                             f.spurious_retransmissions)
                               : "",
             f.cc_paced_pkts ? fmt::format(" paced={} (rate {} Mbit/s at the end)", f.cc_paced_pkts,
                                           f.cc_min_rate_mbps)
                             : "",
             f.drained ? "" : " (requests left unanswered at the end)",
             w.interrupted ? " (interrupted)" : "");
  std::fflush(stdout);
  bench::JsonObject o;
  o.add_uint("size", size)
      .add_uint("window", opt.window)
      .add_double("duration_s", w.seconds)
      .add_uint("messages", messages)
      .add_double("gbps", gbps)
      .add_uint("resp_size", opt.resp_size)
      .add_uint("errors", client.errors(0))
      .add_uint("retransmissions", f.retransmissions)
      .add_uint("spurious_retransmissions", f.spurious_retransmissions)
      .add_uint("cc_paced_pkts", f.cc_paced_pkts);
  return o;
}

// Runs every size (until a stop signal), then writes the JSON.
int run_sizes(const Options& opt, const std::string& setup, rpc::Nexus& nexus,
              const std::string& server_uri, rpc::RpcId client_id, const std::vector<int>& cpus,
              bench::ServerThreads* servers) {
  fmt::print("large_rpc_tput: {}\n", setup);
  print_plan(opt);
  std::vector<bench::JsonObject> results;
  std::uint64_t failures = 0;
  for (const std::size_t size : opt.sizes) {
    if (bench::stop_requested()) break;
    results.push_back(run_size(opt, size, nexus, server_uri, client_id, cpus, servers, &failures));
  }
  if (servers != nullptr) servers->stop();
  if (opt.json) {
    bench::Report r{.transport = opt.ep.transport, .workload = "goodput", .setup = setup};
    r.extra.add_string("mode", bench::mode_name(opt.ep.mode)).add_uint("mtu_bytes", opt.ep.mtu);
    r.extra.append(bench::transport_json(opt.ep));
    r.results = std::move(results);
    bench::write_report(*opt.json, r);
  }
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
  return bench::run_main(kProgram, print_usage, [&] {
    const Options opt = parse_args(argc, argv);
    if (opt.help) {
      print_usage(stdout);
      return 0;
    }
    if (opt.ep.mode == Mode::kServer) return run_server_mode(opt);
    if (opt.ep.mode == Mode::kClient) return run_client_mode(opt);
    return run_both_mode(opt);
  });
}
