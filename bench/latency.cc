// librpc latency benchmark, eRPC style: one outstanding request at a time,
// the response as large as the request (foreground echo handler, run in the
// server's event loop), round-trip percentiles per request size.
//
//   latency [--sizes 32,1024,...|--sweep] [--iters N] [--warmup N] ...
//       both mode (default): server Rpc in a thread pinned to one CPU, client
//       pinned to another, one Nexus on 127.0.0.1 (or --server-uri), both
//       busy-polling
//   latency --mode server --server-uri HOST:PORT
//       serves echo requests at rpc_id 0 until SIGINT/SIGTERM
//   latency --mode client --server-uri HOST:PORT [--client-uri HOST:PORT] ...
//
// Measurement is that of bench/baselines/udp_pingpong: std::chrono::steady_clock
// is read right before enqueue_request and again inside the continuation; the
// client drives its event loop with run_event_loop_once until the continuation
// has run. Each round trip is recorded in a log-linear histogram
// (tools/measure/histogram.h, relative error under 0.4%); percentiles are
// nearest-rank over it, p99.9 and p99.99 included.

#include <fmt/core.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/args.h"
#include "common/connect.h"
#include "common/cpu.h"
#include "common/handlers.h"
#include "common/owned_buffer.h"
#include "common/program.h"
#include "common/report.h"
#include "common/server_threads.h"
#include "librpc/rpc_all.h"

namespace {

using Clock = std::chrono::steady_clock;
using bench::Mode;
using bench::RunError;

constexpr std::string_view kProgram = "latency";
constexpr rpc::RpcId kServerRpcId = 0;
constexpr rpc::RpcId kClientRpcId = 1;            // both mode: shares the server's Nexus
constexpr rpc::RpcId kStandaloneClientRpcId = 0;  // client mode: a Nexus of its own
constexpr std::size_t kDefaultSize = 32;
constexpr std::size_t kSweepMin = 32;
constexpr std::size_t kSweepMax = 64 << 10;
constexpr std::uint64_t kDefaultIters = 200000;
constexpr std::uint64_t kDefaultWarmup = 10000;
// A request that has not completed after this long (librpc retransmits on
// its own every rto_us) means the server is gone.
constexpr auto kRequestTimeout = std::chrono::seconds(5);

struct Options {
  bench::EndpointOptions ep;
  std::vector<std::size_t> sizes{kDefaultSize};
  std::uint64_t iters = kDefaultIters;
  std::uint64_t warmup = kDefaultWarmup;
  std::optional<double> duration_s;
  bench::OutputPaths out;
  bool sweep = false;
};

void add_options(CLI::App& app, Options& opt) {
  bench::configure_app(app);
  bench::add_endpoint_options(app, opt.ep);
  CLI::App& client = *app.add_option_group("Client", "The measurement (client and both mode)");
  constexpr auto kMaxU32 = std::numeric_limits<std::uint32_t>::max();
  auto* sizes = measure::add_sizes_option(client, "--sizes,--size", opt.sizes,
                                          "request (= response) sizes in bytes, K/M suffixes "
                                          "allowed",
                                          0, kMaxU32)
                    ->default_str(std::to_string(kDefaultSize));
  client
      .add_flag("--sweep", opt.sweep,
                fmt::format("sizes {} B .. {} KiB, powers of 2", kSweepMin, kSweepMax >> 10))
      ->excludes(sizes);
  client.add_option("--iters", opt.iters, "measured round trips per size")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{kMaxU32}));
  client.add_option("--warmup", opt.warmup, "unmeasured round trips per size first")
      ->check(CLI::Range(std::uint64_t{0}, std::uint64_t{kMaxU32}));
  client
      .add_option_function<double>(
          "--duration", [&opt](double d) { opt.duration_s = d; },
          "cap on each size's warmup and on its measurement: stop after this long even if "
          "fewer round trips were done")
      ->check(measure::positive_double())
      ->type_name("SECONDS");
  bench::add_output_options(client, opt.out);
}

void check_options(Options& opt, const CLI::App& app) {
  if (opt.sweep) {
    opt.sizes.clear();
    for (std::size_t s = kSweepMin; s <= kSweepMax; s *= 2) opt.sizes.push_back(s);
  }
  bench::check_endpoint_options(opt.ep, bench::any_given(*app.get_option_group("Client")),
                                "--sizes/--sweep/--iters/--warmup/--duration/--json/--csv");
}

// ---------------------------------------------------------------------------
// Client

struct SizeResult {
  std::size_t size = 0;
  measure::Histogram rtt;  // nanoseconds
  std::uint64_t retransmissions = 0;
  bool capped = false;  // stopped by --duration
};

struct Pending {
  bool done = false;
  rpc::Errc errc = rpc::Errc::kOk;
  std::size_t resp_size = 0;
  Clock::time_point t1;
};

void on_response(rpc::Rpc&, const rpc::Completion& c) {
  auto* p = static_cast<Pending*>(c.tag);
  p->t1 = Clock::now();
  p->done = true;
  p->errc = c.errc;
  p->resp_size = c.resp_size;
}

class LatencyClient {
 public:
  LatencyClient(rpc::Rpc& rpc, rpc::SessionNum sn) : rpc_(rpc), sn_(sn) {}

  SizeResult run(std::size_t size, const Options& opt) {
    rpc::OwnedBuffer req = bench::alloc_or_throw(rpc_, size);
    rpc::OwnedBuffer resp = bench::alloc_or_throw(rpc_, size);
    bench::fill_pattern(req);
    SizeResult res;
    res.size = size;
    measure(res, req, resp, opt);
    return res;
  }

 private:
  void measure(SizeResult& res, rpc::MsgBuffer& req, rpc::MsgBuffer& resp, const Options& opt) {
    const auto cap = opt.duration_s ? std::chrono::duration_cast<Clock::duration>(
                                          std::chrono::duration<double>(*opt.duration_s))
                                    : Clock::duration::max();
    const auto warmup_start = Clock::now();
    for (std::uint64_t k = 0; k < opt.warmup; ++k) {
      round_trip(req, resp, res.size);
      if ((k & 0xff) == 0xff && Clock::now() - warmup_start > cap) break;
    }
    // Retransmissions are counted over the measured round trips only.
    const std::uint64_t retrans_before = rpc_.stats().retransmissions;
    const auto start = Clock::now();
    for (std::uint64_t k = 0; k < opt.iters; ++k) {
      res.rtt.record(round_trip(req, resp, res.size));
      // Checking the cap every 256 round trips keeps the clock read off
      // the timed path's neighbourhood most of the time.
      if ((k & 0xff) == 0xff && Clock::now() - start > cap) {
        res.capped = k + 1 < opt.iters;
        break;
      }
    }
    res.retransmissions = rpc_.stats().retransmissions - retrans_before;
  }

  // One request of `size` bytes; returns its round-trip time in ns.
  std::uint64_t round_trip(rpc::MsgBuffer& req, rpc::MsgBuffer& resp, std::size_t size) {
    // Tag the payload with a sequence number so the echo is checked to be
    // this request's, not merely of the right size.
    const std::size_t tag = std::min(sizeof seq_, size);
    std::memcpy(req.data(), &seq_, tag);
    resp.resize(resp.max_size());
    Pending p;

    const auto t0 = Clock::now();
    const rpc::Errc rc = rpc_.enqueue_request(sn_, bench::kEchoType, req, resp, on_response, &p);
    if (rc != rpc::Errc::kOk) {
      throw RunError(fmt::format("enqueue_request: {}", rpc::to_string(rc)));
    }
    for (std::uint32_t spins = 1; !p.done; ++spins) {
      rpc_.run_event_loop_once();
      if ((spins & 0xfff) == 0 && !p.done && Clock::now() - t0 > kRequestTimeout) {
        throw RunError(
            fmt::format("no response to a {}-byte request within {} s; is the server running?",
                        size, kRequestTimeout.count()));
      }
    }
    const auto rtt = static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(p.t1 - t0).count());

    if (p.errc != rpc::Errc::kOk) {
      throw RunError(fmt::format("request failed: {}", rpc::to_string(p.errc)));
    }
    if (p.resp_size != size || std::memcmp(resp.data(), req.data(), tag) != 0) {
      throw RunError(
          fmt::format("bad echo: sent {} B (seq {}), got {} B", size, seq_, p.resp_size));
    }
    ++seq_;
    return rtt;
  }

  rpc::Rpc& rpc_;
  rpc::SessionNum sn_;
  std::uint64_t seq_ = 0;
};

void print_header() {
  fmt::print("{}\n{:>8} {:>9} {}\n", measure::kRttNote, "size", "iters", measure::rtt_header());
}

void print_result(const SizeResult& r) {
  fmt::print("{:>8} {:>9} {}{}\n", r.size, r.rtt.count(), measure::rtt_row(r.rtt),
             r.capped ? " (capped by --duration)" : "");
  std::fflush(stdout);
}

measure::Json result_json(const SizeResult& r) {
  measure::Json o;
  o["size"] = r.size;
  o["iters"] = r.rtt.count();
  measure::add_rtt_fields(o, r.rtt);
  o["retransmissions"] = r.retransmissions;
  o["capped"] = r.capped;
  return o;
}

// Connects a session to rpc 0 at server_uri and runs every size; returns
// the result file (without the final load check).
measure::Json run_client(rpc::Rpc& client, const bench::ConnectWatch& watch,
                         const std::string& server_uri, const Options& opt,
                         bench::RunChecks& checks) {
  for (std::size_t size : opt.sizes) {
    if (size > client.max_msg_size()) {
      throw RunError(fmt::format("size {} exceeds the largest message of this Rpc ({} B)", size,
                                 client.max_msg_size()));
    }
  }
  const bench::ClientSession session = bench::start_session(client, server_uri, kServerRpcId);
  bench::wait_connected(client, {&session, 1}, watch, server_uri);

  LatencyClient lc(client, session.num);
  measure::Json results = measure::Json::array();
  print_header();
  for (std::size_t size : opt.sizes) {
    checks.point_begin();
    const SizeResult r = lc.run(size, opt);
    if (r.rtt.empty()) throw RunError("no round trips completed");
    print_result(r);
    checks.point_end(fmt::format("size {} B", r.size), r.retransmissions, &r.rtt);
    results.push_back(result_json(r));
  }
  bench::close_sessions(client, {&session, 1});
  return results;
}

void print_plan(const Options& opt) {
  fmt::print(
      "latency: transport {}, mtu {}, 1 outstanding request, echo of the same size, "
      "sizes {} B, {} warmup + {} measured round trips per size{}\n",
      opt.ep.transport, bench::mtu_name(opt.ep.mtu), fmt::join(opt.sizes, ","), opt.warmup,
      opt.iters, opt.duration_s ? fmt::format(" (at most {} s each)", *opt.duration_s) : "");
  std::fflush(stdout);
}

void write_outputs(const Options& opt, const std::string& setup, measure::Json results,
                   bench::RunChecks& checks) {
  checks.finish();
  measure::Json config = bench::endpoint_config(opt.ep);
  config["warmup"] = opt.warmup;
  config["iters"] = opt.iters;
  if (opt.duration_s) config["duration_cap_s"] = *opt.duration_s;
  measure::ResultFile file = checks.result_file(opt.ep.transport, "latency", setup, config);
  file.results = std::move(results);
  bench::write_outputs(opt.out, file);
}

// ---------------------------------------------------------------------------
// Modes

int run_server_mode(const Options& opt) {
  rpc::Nexus nexus(bench::make_nexus_config(opt.ep, *opt.ep.server_uri));
  bench::register_bench_handlers(nexus);
  bench::install_stop_signals();
  bench::ServerThreads server(nexus, opt.ep, 1, kServerRpcId, /*cpus=*/{});
  fmt::print(
      "latency server: rpc {} on {} (transport {}, mtu {}), busy-polling, echo handler in the "
      "event loop; Ctrl-C to stop\n",
      kServerRpcId, nexus.uri(), opt.ep.transport, bench::mtu_name(opt.ep.mtu));
  std::fflush(stdout);
  const std::uint64_t served = bench::serve_until_stopped(kProgram, server, /*progress=*/false);
  fmt::print("latency server: stopping after {} requests\n", served);
  return 0;
}

int run_client_mode(const Options& opt) {
  rpc::Nexus nexus(bench::make_nexus_config(opt.ep, bench::client_nexus_uri(opt.ep)));
  bench::ConnectWatch watch;
  rpc::Rpc client(nexus, bench::make_rpc_config(opt.ep, kStandaloneClientRpcId, &watch));
  bench::print_transport_choice(client);
  const std::string setup =
      fmt::format("client on {} against rpc {} at {}, busy-polling, not pinned", nexus.uri(),
                  kServerRpcId, *opt.ep.server_uri);
  fmt::print("latency: client mode: {}\n", setup);
  print_plan(opt);
  bench::RunChecks checks(/*busy_cores=*/1);
  auto results = run_client(client, watch, *opt.ep.server_uri, opt, checks);
  write_outputs(opt, setup, std::move(results), checks);
  return 0;
}

int run_both_mode(const Options& opt) {
  const bench::CpuPlan plan = bench::plan_cpus(1, 1);
  // The Nexus (and its session-management thread) is created before any
  // pinning, so that thread keeps the process's original affinity.
  rpc::Nexus nexus(bench::make_nexus_config(opt.ep, opt.ep.server_uri.value_or("127.0.0.1:0")));
  bench::register_bench_handlers(nexus);
  bench::ServerThreads server(nexus, opt.ep, 1, kServerRpcId, plan.server_cpus);

  const bool pinned =
      server.all_pinned() && bench::pin_current_thread(plan.client_cpus[0], "client thread");
  const std::string setup =
      pinned ? fmt::format(
                   "both mode on {}: server Rpc thread pinned to CPU {}, client pinned to "
                   "CPU {}, both busy-polling",
                   nexus.uri(), plan.server_cpus[0], plan.client_cpus[0])
             : fmt::format(
                   "both mode on {}: NOT pinned ({}); server and client threads float, "
                   "both busy-polling",
                   nexus.uri(),
                   plan.why_not_pinned.empty() ? "pthread_setaffinity_np failed"
                                               : plan.why_not_pinned);
  fmt::print("latency: {}\n", setup);
  print_plan(opt);

  measure::Json results;
  std::exception_ptr client_error;
  bench::RunChecks checks(/*busy_cores=*/2);
  try {
    bench::ConnectWatch watch;
    rpc::Rpc client(nexus, bench::make_rpc_config(opt.ep, kClientRpcId, &watch));
    bench::print_transport_choice(client);
    results = run_client(client, watch, nexus.uri(), opt, checks);
  } catch (...) {
    client_error = std::current_exception();
  }
  // A server error is the likelier cause of a client error: report it first.
  server.stop();
  if (client_error) std::rethrow_exception(client_error);
  write_outputs(opt, setup, std::move(results), checks);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app(
      "librpc round-trip latency, eRPC style: one outstanding request, echoed at the same size",
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
