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
// has run. Percentiles are nearest-rank over the measured round trips.

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
#include "common/json.h"
#include "common/owned_buffer.h"
#include "common/program.h"
#include "common/server_threads.h"
#include "common/summary.h"
#include "librpc/rpc_all.h"

namespace {

using Clock = std::chrono::steady_clock;
using bench::Mode;
using bench::RunError;
using bench::UsageError;

constexpr std::string_view kProgram = "latency";
constexpr rpc::RpcId kServerRpcId = 0;
constexpr rpc::RpcId kClientRpcId = 1;            // both mode: shares the server's Nexus
constexpr rpc::RpcId kStandaloneClientRpcId = 0;  // client mode: a Nexus of its own
constexpr std::size_t kDefaultSize = 32;
constexpr std::size_t kSweepMin = 32;
constexpr std::size_t kSweepMax = 64 << 10;
constexpr std::uint64_t kDefaultIters = 200000;
constexpr std::uint64_t kDefaultWarmup = 10000;
// Round-trip times kept in the JSON file for CDF plots (SCHEMA.md).
constexpr std::size_t kMaxJsonSamples = 1000;
// A request that has not completed after this long (librpc retransmits on
// its own every rto_us) means the server is gone.
constexpr auto kRequestTimeout = std::chrono::seconds(5);

void print_usage(std::FILE* out) {
  fmt::print(out,
             "usage: latency [--mode both|server|client] [options]\n"
             "\n"
             "  --mode M             both (default): server + client in this process;\n"
             "                       server: serve echo at rpc_id 0 until SIGINT/SIGTERM;\n"
             "                       client: measure against rpc 0 at --server-uri\n"
             "{}"
             "  --sizes A,B,...      request (= response) sizes in bytes, K/M suffixes\n"
             "                       allowed (default {})\n"
             "  --sweep              sizes {} B .. {} KiB, powers of 2\n"
             "  --iters N            measured round trips per size (default {})\n"
             "  --warmup N           unmeasured round trips per size first (default {})\n"
             "  --duration SECONDS   cap on each size's warmup and on its measurement: stop\n"
             "                       after this long even if fewer round trips were done\n"
             "  --json FILE          also write the results as JSON to FILE\n"
             "  -h, --help           show this help\n",
             bench::endpoint_usage(), kDefaultSize, kSweepMin, kSweepMax >> 10, kDefaultIters,
             kDefaultWarmup);
}

struct Options {
  bench::EndpointOptions ep;
  std::vector<std::size_t> sizes{kDefaultSize};
  std::uint64_t iters = kDefaultIters;
  std::uint64_t warmup = kDefaultWarmup;
  std::optional<double> duration_s;
  std::optional<std::string> json;
  bool help = false;
};

Options parse_args(int argc, char** argv) {
  static constexpr std::string_view kValued[] = {
      "--sizes", "--iters", "--warmup", "--duration", "--json", "--size",
  };
  static constexpr std::string_view kSwitches[] = {"--sweep"};
  Options opt;
  bool sizes_given = false;
  bool sweep = false;
  bool client_flag_given = false;
  constexpr auto kMaxU32 = std::numeric_limits<std::uint32_t>::max();
  for (const bench::Flag& f : bench::split_flags(argc, argv, kValued, kSwitches)) {
    if (f.name == "--help") {
      opt.help = true;
      return opt;
    }
    if (bench::apply_endpoint_flag(opt.ep, f)) continue;
    client_flag_given = true;
    if (f.name == "--sweep") {
      sweep = true;
    } else if (f.name == "--sizes" || f.name == "--size") {
      opt.sizes = bench::parse_sizes(f.name, f.value, kMaxU32);
      sizes_given = true;
    } else if (f.name == "--iters") {
      opt.iters = bench::parse_unsigned(f.name, f.value, 1, kMaxU32);
    } else if (f.name == "--warmup") {
      opt.warmup = bench::parse_unsigned(f.name, f.value, 0, kMaxU32);
    } else if (f.name == "--duration") {
      opt.duration_s = bench::parse_positive_double(f.name, f.value);
    } else if (f.name == "--json") {
      opt.json = bench::parse_path(f.name, f.value);
    }
  }
  if (sweep && sizes_given) throw UsageError("--sizes and --sweep are mutually exclusive");
  if (sweep) {
    opt.sizes.clear();
    for (std::size_t s = kSweepMin; s <= kSweepMax; s *= 2) opt.sizes.push_back(s);
  }
  bench::check_endpoint_options(opt.ep, client_flag_given,
                                "--sizes/--sweep/--iters/--warmup/--duration/--json");
  return opt;
}

// ---------------------------------------------------------------------------
// Client

struct SizeResult {
  std::size_t size = 0;
  std::vector<std::int64_t> rtt_ns;  // sorted after the run
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
    std::sort(res.rtt_ns.begin(), res.rtt_ns.end());
    return res;
  }

 private:
  void measure(SizeResult& res, rpc::MsgBuffer& req, rpc::MsgBuffer& resp, const Options& opt) {
    res.rtt_ns.reserve(static_cast<std::size_t>(opt.iters));
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
      res.rtt_ns.push_back(round_trip(req, resp, res.size));
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
  std::int64_t round_trip(rpc::MsgBuffer& req, rpc::MsgBuffer& resp, std::size_t size) {
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
    const std::int64_t rtt =
        std::chrono::duration_cast<std::chrono::nanoseconds>(p.t1 - t0).count();

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

void print_result(const SizeResult& r, const bench::LatencySummary& s) {
  fmt::print(
      "librpc size={} B iters={} p50={:.2f} us p90={:.2f} us p99={:.2f} us p99.9={:.2f} us "
      "max={:.2f} us{}{}\n",
      r.size, s.iters, s.p50_us, s.p90_us, s.p99_us, s.p999_us, s.max_us,
      r.retransmissions ? fmt::format(" retransmissions={}", r.retransmissions) : std::string(),
      r.capped ? " (capped by --duration)" : "");
  std::fflush(stdout);
}

bench::JsonObject result_json(const SizeResult& r) {
  const bench::LatencySummary s = bench::summarize(r.rtt_ns);
  bench::JsonObject o;
  o.add_uint("size", r.size)
      .add_uint("iters", s.iters)
      .add_double("p50_us", s.p50_us)
      .add_double("p90_us", s.p90_us)
      .add_double("p99_us", s.p99_us)
      .add_double("p999_us", s.p999_us)
      .add_double("max_us", s.max_us)
      .add_double("min_us", s.min_us)
      .add_double("mean_us", s.mean_us)
      .add_uint("retransmissions", r.retransmissions)
      .add_raw("samples_us",
               bench::json_double_array(bench::downsample_us(r.rtt_ns, kMaxJsonSamples)));
  return o;
}

// Connects a session to rpc 0 at server_uri and runs every size; returns
// the JSON result of each.
std::vector<bench::JsonObject> run_client(rpc::Rpc& client, const bench::ConnectWatch& watch,
                                          const std::string& server_uri, const Options& opt) {
  for (std::size_t size : opt.sizes) {
    if (size > client.max_msg_size()) {
      throw RunError(fmt::format("size {} exceeds the largest message of this Rpc ({} B)", size,
                                 client.max_msg_size()));
    }
  }
  const bench::ClientSession session = bench::start_session(client, server_uri, kServerRpcId);
  bench::wait_connected(client, {&session, 1}, watch, server_uri);

  LatencyClient lc(client, session.num);
  std::vector<bench::JsonObject> results;
  for (std::size_t size : opt.sizes) {
    const SizeResult r = lc.run(size, opt);
    if (r.rtt_ns.empty()) throw RunError("no round trips completed");
    print_result(r, bench::summarize(r.rtt_ns));
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

void write_json(const Options& opt, const std::string& setup,
                std::vector<bench::JsonObject> results) {
  bench::Report report{.transport = opt.ep.transport, .workload = "latency", .setup = setup};
  report.extra.add_string("mode", bench::mode_name(opt.ep.mode))
      .add_uint("mtu_bytes", opt.ep.mtu)
      .add_uint("warmup", opt.warmup)
      .append(bench::transport_json(opt.ep));
  report.results = std::move(results);
  bench::write_report(*opt.json, report);
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
  auto results = run_client(client, watch, *opt.ep.server_uri, opt);
  if (opt.json) write_json(opt, setup, std::move(results));
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

  std::vector<bench::JsonObject> results;
  std::exception_ptr client_error;
  try {
    bench::ConnectWatch watch;
    rpc::Rpc client(nexus, bench::make_rpc_config(opt.ep, kClientRpcId, &watch));
    bench::print_transport_choice(client);
    results = run_client(client, watch, nexus.uri(), opt);
  } catch (...) {
    client_error = std::current_exception();
  }
  // A server error is the likelier cause of a client error: report it first.
  server.stop();
  if (client_error) std::rethrow_exception(client_error);
  if (opt.json) write_json(opt, setup, std::move(results));
  return 0;
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
