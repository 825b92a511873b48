// librpc small-RPC rate benchmark, after eRPC's small_rpc_tput: client
// threads keep a window of requests outstanding on each of their sessions
// (each continuation re-enqueues its request at once) against server
// threads that echo them from their event loops; the result is requests per
// second in total, per client thread and per server thread.
//
//   small_rpc_tput [--window W] [--sessions N] [--client-threads N] ...
//       both mode (default): server and client threads in this process, one
//       Nexus on 127.0.0.1 (or --server-uri), each thread pinned to a CPU of
//       its own when there are enough, all busy-polling
//   small_rpc_tput --mode server --server-uri HOST:PORT [--server-threads N]
//       serves at rpc_ids 0..N-1 until SIGINT/SIGTERM
//   small_rpc_tput --mode client --server-uri HOST:PORT [--server-threads N] ...
//
// Only completions with Errc::kOk and a response of the right size count;
// any failed request makes the exit status 1. The measured window follows a
// short warmup; SIGINT/SIGTERM ends it early and the partial result is
// still reported. In the JSON result "sessions" is per client thread, and
// client_thread_rps / server_thread_rps (both mode) give each thread's rate;
// rps_per_server_thread is the mean.

#include <fmt/core.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
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

constexpr std::string_view kProgram = "small_rpc_tput";
constexpr std::size_t kDefaultWindow = 8;
// Requests one session has in flight (the engine's kSessionReqWindow); a
// larger window waits in the session's backlog.
constexpr std::size_t kSessionReqSlots = 32;
constexpr std::size_t kDefaultSize = 32;
constexpr double kDefaultDurationS = 5;
// Each session reserves 32 of an Rpc's 4096 RX ring entries at both ends.
constexpr std::size_t kMaxSessions = 128;
constexpr std::size_t kMaxThreads = 64;  // client + server rpc_ids must fit in 0..254
constexpr std::size_t kMaxWindow = 4096;
// The udp transport's kMaxBatch (datagrams per sendmmsg/recvmmsg), which is
// not in the public API; reported as the SCHEMA's "batch".
constexpr std::size_t kUdpMaxBatch = 32;

struct Options {
  bench::EndpointOptions ep;
  std::size_t server_threads = 1;
  std::size_t client_threads = 1;
  std::size_t sessions = 1;
  std::size_t window = kDefaultWindow;
  std::size_t size = kDefaultSize;
  double duration_s = kDefaultDurationS;
  bench::OutputPaths out;
};

void add_options(CLI::App& app, Options& opt) {
  bench::configure_app(app);
  app.footer(
      "Both mode runs server and client threads in this process, each pinned to its own CPU "
      "when there are enough, busy-polling; server and client mode do not pin (place them "
      "with taskset -c).");
  bench::add_endpoint_options(app, opt.ep);
  app.add_option("--server-threads", opt.server_threads,
                 "server threads, rpc_ids 0..N-1; in client mode, how many rpc_ids the server "
                 "has")
      ->check(CLI::Range(std::size_t{1}, kMaxThreads));
  CLI::App& client = *app.add_option_group("Client", "The load (client and both mode)");
  client.add_option("--client-threads", opt.client_threads, "client threads, an Rpc each")
      ->check(CLI::Range(std::size_t{1}, kMaxThreads));
  client
      .add_option("--sessions", opt.sessions,
                  "sessions per client thread, spread round-robin over the server rpc_ids")
      ->check(CLI::Range(std::size_t{1}, kMaxSessions));
  client
      .add_option("--window", opt.window,
                  "outstanding requests per session; above 8 the rest wait in the session "
                  "backlog")
      ->check(CLI::Range(std::size_t{1}, kMaxWindow));
  measure::add_size_option(client, "--size", opt.size, "request and response size", 0,
                           std::numeric_limits<std::uint32_t>::max());
  client
      .add_option("--duration", opt.duration_s,
                  "measured time, after a warmup of a tenth of it (at most 0.5 s)")
      ->check(measure::positive_double())
      ->type_name("SECONDS");
  bench::add_output_options(client, opt.out);
}

void check_options(const Options& opt, const CLI::App& app) {
  bench::check_endpoint_options(
      opt.ep, bench::any_given(*app.get_option_group("Client")),
      "--sessions/--window/--size/--client-threads/--duration/--json/--csv");
}

bench::ClientThreadsConfig client_config(const Options& opt, const std::string& server_uri,
                                         rpc::RpcId first_id, const std::vector<int>& cpus) {
  bench::ClientThreadsConfig c;
  c.ep = opt.ep;
  c.server_uri = server_uri;
  c.threads = opt.client_threads;
  c.first_id = first_id;
  c.sessions = opt.sessions;
  c.server_threads = opt.server_threads;
  c.load = {.req_type = bench::kEchoType,
            .req_size = opt.size,
            .resp_size = opt.size,
            .window = opt.window};
  c.cpus = cpus;
  return c;
}

void print_plan(const Options& opt) {
  fmt::print(
      "small_rpc_tput: transport {}, mtu {}, {} B requests and responses (echo), window {} x "
      "{} session{} per client thread, {} s measured{}\n",
      opt.ep.transport, bench::mtu_name(opt.ep.mtu), opt.size, opt.window, opt.sessions,
      opt.sessions == 1 ? "" : "s", opt.duration_s,
      opt.window > kSessionReqSlots ? " (requests beyond 32 per session wait in the backlog)" : "");
  std::fflush(stdout);
}

double warmup_s(const Options& opt) { return std::min(0.5, opt.duration_s / 10); }

std::string format_rate(double per_s) {
  return per_s >= 1e6 ? fmt::format("{:.0f} ({:.2f} M)", per_s, per_s / 1e6)
                      : fmt::format("{:.0f}", per_s);
}

// What one run measured, summed over the client threads.
struct Totals {
  std::uint64_t requests = 0;
  std::uint64_t errors = 0;
  std::uint64_t retransmissions = 0;
  bool drained = true;  // nothing was left outstanding at the end
  double rps = 0, per_client = 0, per_server = 0;
  std::vector<double> client_rps, server_rps;  // measured per thread
};

Totals sum_up(const Options& opt, const bench::Window& w, const bench::ClientThreads& clients) {
  Totals t;
  for (std::size_t i = 0; i < clients.size(); ++i) {
    t.requests += w.client_completed[i];
    t.errors += clients.errors(i);
    t.retransmissions += clients.final_state(i).retransmissions;
    t.drained = t.drained && clients.final_state(i).drained;
    t.client_rps.push_back(static_cast<double>(w.client_completed[i]) / w.seconds);
  }
  for (const std::uint64_t n : w.server_requests) {
    t.server_rps.push_back(static_cast<double>(n) / w.seconds);
  }
  t.rps = static_cast<double>(t.requests) / w.seconds;
  t.per_client = t.rps / static_cast<double>(opt.client_threads);
  t.per_server = t.rps / static_cast<double>(opt.server_threads);
  return t;
}

void print_totals(const Options& opt, const bench::Window& w, const Totals& t,
                  const bench::ClientThreads& clients) {
  fmt::print(
      "librpc size={} B window={} sessions={} client_threads={} server_threads={}: rps={} "
      "per_client_thread={} per_server_thread={} ({} requests in {:.2f} s){}{}{}\n",
      opt.size, opt.window, opt.sessions, opt.client_threads, opt.server_threads,
      format_rate(t.rps), format_rate(t.per_client), format_rate(t.per_server), t.requests,
      w.seconds, t.errors ? fmt::format(" errors={}", t.errors) : "",
      t.retransmissions ? fmt::format(" retransmissions={}", t.retransmissions) : "",
      w.interrupted ? " (interrupted)" : "");
  if (t.client_rps.size() > 1) {
    fmt::print("  per client thread: {:.0f}\n", fmt::join(t.client_rps, " "));
  }
  if (t.server_rps.size() > 1) {
    fmt::print("  per server thread: {:.0f}\n", fmt::join(t.server_rps, " "));
  }
  std::fflush(stdout);
  for (std::size_t i = 0; i < clients.size(); ++i) {
    const auto& f = clients.final_state(i);
    if (!f.first_error.empty()) {
      fmt::print(stderr, "small_rpc_tput: client thread {}: first error: {}\n", i, f.first_error);
    }
    if (!f.drained) {
      fmt::print(stderr,
                 "small_rpc_tput: client thread {}: requests still outstanding at the end; "
                 "the server stopped answering\n",
                 i);
    }
  }
}

void write_outputs(const Options& opt, const std::string& setup, const bench::Window& w,
                   const Totals& t, const bench::RunChecks& checks) {
  measure::Json config = bench::endpoint_config(opt.ep);
  if (opt.ep.transport == "udp") config["udp_batch"] = kUdpMaxBatch;
  measure::ResultFile file = checks.result_file(opt.ep.transport, "rate", setup, config);
  measure::Json o;
  o["size"] = opt.size;
  o["window"] = opt.window;
  o["sessions"] = opt.sessions;
  o["client_threads"] = opt.client_threads;
  o["server_threads"] = opt.server_threads;
  if (opt.ep.transport == "udp") o["batch"] = kUdpMaxBatch;
  o["duration_s"] = measure::round_to(w.seconds);
  o["requests"] = t.requests;
  o["rps"] = measure::round_to(t.rps, 1);
  o["rps_per_client_thread"] = measure::round_to(t.per_client, 1);
  o["rps_per_server_thread"] = measure::round_to(t.per_server, 1);
  o["errors"] = t.errors;
  o["retransmissions"] = t.retransmissions;
  o["interrupted"] = w.interrupted;
  o["client_thread_rps"] = bench::rounded(t.client_rps);
  if (!t.server_rps.empty()) o["server_thread_rps"] = bench::rounded(t.server_rps);
  file.results.push_back(std::move(o));
  bench::write_outputs(opt.out, file);
}

// Measures with running clients (and servers, in both mode), then stops them.
int measure_and_report(const Options& opt, const std::string& setup, bench::ClientThreads& clients,
                       bench::ServerThreads* servers) {
  fmt::print("small_rpc_tput: {}\n", setup);
  std::fflush(stdout);
  // Busy-polling threads: the servers in this process, and the clients.
  bench::RunChecks checks(
      static_cast<int>(opt.client_threads + (servers != nullptr ? opt.server_threads : 0)));
  const bench::Window w =
      bench::measure_then_stop(kProgram, clients, servers, warmup_s(opt), opt.duration_s,
                               [](double per_s) { return format_rate(per_s) + " requests/s"; });
  if (servers != nullptr) servers->stop();
  const Totals t = sum_up(opt, w, clients);
  print_totals(opt, w, t, clients);
  checks.point_end("", t.retransmissions);
  checks.finish();
  write_outputs(opt, setup, w, t, checks);
  // Failed requests, or requests left unanswered, fail the run.
  return t.errors == 0 && t.drained ? 0 : 1;
}

int run_server_mode(const Options& opt) {
  rpc::Nexus nexus(bench::make_nexus_config(opt.ep, *opt.ep.server_uri));
  bench::register_bench_handlers(nexus);
  bench::install_stop_signals();
  // Not pinned: a client on the same host would pin onto the same CPUs.
  bench::ServerThreads servers(nexus, opt.ep, opt.server_threads, 0, /*cpus=*/{});
  fmt::print(
      "small_rpc_tput server: rpc_ids 0..{} on {} (transport {}, mtu {}), {} server thread{}, "
      "not pinned, busy-polling, echo handler in the event loop; Ctrl-C to stop\n",
      opt.server_threads - 1, nexus.uri(), opt.ep.transport, bench::mtu_name(opt.ep.mtu),
      opt.server_threads, opt.server_threads == 1 ? "" : "s");
  std::fflush(stdout);
  const std::uint64_t served = bench::serve_until_stopped(kProgram, servers, /*progress=*/true);
  fmt::print("small_rpc_tput server: stopping after {} requests\n", served);
  return 0;
}

int run_client_mode(const Options& opt) {
  rpc::Nexus nexus(bench::make_nexus_config(opt.ep, bench::client_nexus_uri(opt.ep)));
  bench::install_stop_signals();
  print_plan(opt);
  bench::ClientThreads clients(nexus, client_config(opt, *opt.ep.server_uri, 0, /*cpus=*/{}));
  const std::string setup = fmt::format(
      "client mode on {} against rpc_ids 0..{} at {}: {} client thread{}, not pinned, "
      "busy-polling{}",
      nexus.uri(), opt.server_threads - 1, *opt.ep.server_uri, opt.client_threads,
      opt.client_threads == 1 ? "" : "s",
      opt.ep.transport == "udp" ? fmt::format(", udp batch {}", kUdpMaxBatch) : "");
  return measure_and_report(opt, setup, clients, nullptr);
}

int run_both_mode(const Options& opt) {
  const bench::CpuPlan plan = bench::plan_cpus(opt.client_threads, opt.server_threads);
  // The Nexus (and its session-management thread) is created on this
  // thread, which is never pinned: it only sleeps and prints.
  rpc::Nexus nexus(bench::make_nexus_config(opt.ep, opt.ep.server_uri.value_or("127.0.0.1:0")));
  bench::register_bench_handlers(nexus);
  bench::install_stop_signals();
  print_plan(opt);
  bench::ServerThreads servers(nexus, opt.ep, opt.server_threads, 0, plan.server_cpus);
  const auto first_client_id = static_cast<rpc::RpcId>(opt.server_threads);
  bench::ClientThreads clients(nexus,
                               client_config(opt, nexus.uri(), first_client_id, plan.client_cpus));
  std::string setup = fmt::format(
      "both mode on {}: {}, {}, all busy-polling{}", nexus.uri(),
      bench::describe_threads("server", servers.size(), plan.server_cpus, servers.all_pinned()),
      bench::describe_threads("client", clients.size(), plan.client_cpus, clients.all_pinned()),
      opt.ep.transport == "udp" ? fmt::format(", udp batch {}", kUdpMaxBatch) : "");
  if (plan.shared) setup += " (more threads than CPUs: some share one, rates suffer)";
  if (!plan.why_not_pinned.empty()) setup += fmt::format(" ({})", plan.why_not_pinned);
  return measure_and_report(opt, setup, clients, &servers);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app(
      "librpc small-RPC rate, after eRPC's small_rpc_tput: windows of echo requests per session",
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
