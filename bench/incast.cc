// One host of the incast scenario (bench/incast.sh): many clients send
// through one bottleneck link to one server. Each client keeps one session
// busy with back-to-back bulk requests (1 MiB by default, answered with 8
// bytes) and measures latency on a second session with small probes (32 B,
// one every --probe-interval-us). The server answers both.
//
//   incast --mode server --server-uri HOST:PORT
//       serves until SIGINT/SIGTERM, then prints one "stats ..." line
//   incast --mode client --server-uri HOST:PORT --client-uri HOST:0
//       [--duration S] [--bulk-size BYTES] [--json FILE]
//
// --idle-sleep-us N (both modes): sleep that long when a loop iteration
// found nothing to do, so that dozens of hosts share two cores (every
// process busy-polling would measure the scheduler, not the network).

#include <fmt/core.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/args.h"
#include "common/connect.h"
#include "common/program.h"
#include "common/report.h"
#include "librpc/rpc_all.h"

namespace {

using bench::Mode;
using bench::RunError;
using Clock = std::chrono::steady_clock;

constexpr std::string_view kProgram = "incast";
constexpr rpc::ReqType kBulkType = 1;   // any size in, 8 bytes back
constexpr rpc::ReqType kProbeType = 2;  // echo
constexpr std::size_t kBulkRespBytes = 8;
constexpr std::size_t kProbeBytes = 32;

struct Options {
  bench::EndpointOptions ep;
  double duration_s = 5;
  std::size_t bulk_size = std::size_t{1} << 20;
  uint64_t probe_interval_us = 1000;
  uint64_t idle_sleep_us = 0;
  bench::OutputPaths out;
};

void add_options(CLI::App& app, Options& opt) {
  bench::configure_app(app);
  app.footer("Runs as --mode server or --mode client, one per host (bench/incast.sh).");
  bench::add_endpoint_options(app, opt.ep);
  app.add_option("--idle-sleep-us", opt.idle_sleep_us,
                 "sleep when a loop iteration had nothing to do (0: busy-poll)")
      ->check(CLI::Range(std::uint64_t{0}, std::uint64_t{100000}));
  CLI::App& client = *app.add_option_group("Client", "The load (client mode)");
  client.add_option("--duration", opt.duration_s, "how long to send")
      ->check(measure::positive_double())
      ->type_name("SECONDS");
  measure::add_size_option(client, "--bulk-size", opt.bulk_size, "bulk request size", 0,
                           std::size_t{64} << 20)
      ->default_str("1M");
  client.add_option("--probe-interval-us", opt.probe_interval_us, "time between probes")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{10'000'000}));
  bench::add_output_options(client, opt.out);
}

void check_options(const Options& opt, const CLI::App& app) {
  bench::check_endpoint_options(opt.ep, bench::any_given(*app.get_option_group("Client")),
                                "--duration/--bulk-size/--probe-interval-us/--json/--csv");
  if (opt.ep.mode == Mode::kBoth) {
    throw bench::UsageError("incast runs as --mode server or --mode client (bench/incast.sh)");
  }
}

void idle(const Options& opt) {
  if (opt.idle_sleep_us == 0) return;
  const timespec ts{0, static_cast<long>(opt.idle_sleep_us * 1000)};
  ::nanosleep(&ts, nullptr);
}

// Runs one loop iteration; sleeps if it received nothing.
void poll(rpc::Rpc& rpc, const Options& opt) {
  const uint64_t before = rpc.stats().rx_pkts;
  rpc.run_event_loop_once();
  if (rpc.stats().rx_pkts == before) idle(opt);
}

void bulk_handler(rpc::ReqHandle& h) {
  rpc::MsgBuffer& resp = h.pre_resp_buffer();
  resp.resize(kBulkRespBytes);
  std::fill_n(resp.data(), kBulkRespBytes, uint8_t{0});
  h.rpc().enqueue_response(h, resp);
}

void probe_handler(rpc::ReqHandle& h) {
  rpc::MsgBuffer& resp = h.pre_resp_buffer();
  resp.resize(h.request().size());
  std::copy_n(h.request().data(), h.request().size(), resp.data());
  h.rpc().enqueue_response(h, resp);
}

int run_server(const Options& opt) {
  bench::install_stop_signals();
  rpc::Nexus nexus(bench::make_nexus_config(opt.ep, *opt.ep.server_uri));
  if (!nexus.register_handler(kBulkType, bulk_handler) ||
      !nexus.register_handler(kProbeType, probe_handler)) {
    throw RunError("cannot register the handlers");
  }
  rpc::RpcConfig config = bench::make_rpc_config(opt.ep, 0);
  rpc::Rpc rpc(nexus, config);
  fmt::print("ready {}\n", nexus.uri());
  std::fflush(stdout);
  while (!bench::stop_requested()) poll(rpc, opt);
  const rpc::RpcStats& s = rpc.stats();
  fmt::print("stats handlers_run={} duplicate_requests={} rx_pkts={} rx_ring_full={}\n",
             s.handlers_run, s.duplicate_requests, s.rx_pkts, s.drops.rx_ring_full);
  return 0;
}

struct ClientState {
  rpc::MsgBuffer bulk_req, bulk_resp, probe_req, probe_resp;
  rpc::SessionNum bulk_sn = rpc::kInvalidSessionNum;
  rpc::SessionNum probe_sn = rpc::kInvalidSessionNum;
  bool stopping = false;
  bool probe_out = false;
  Clock::time_point probe_sent;
  measure::Histogram probe_rtt;  // nanoseconds
  uint64_t bulk_done = 0;
  uint64_t errors = 0;
};

void bulk_done(rpc::Rpc& rpc, const rpc::Completion& c) {
  auto& st = *static_cast<ClientState*>(c.tag);
  if (c.errc != rpc::Errc::kOk || c.resp_size != kBulkRespBytes) {
    if (!st.stopping) st.errors++;  // not those ~Rpc fails after the run
    return;
  }
  st.bulk_done++;
  if (st.stopping) return;
  if (rpc.enqueue_request(st.bulk_sn, kBulkType, st.bulk_req, st.bulk_resp, bulk_done, &st) !=
      rpc::Errc::kOk) {
    st.errors++;
  }
}

void probe_done(rpc::Rpc&, const rpc::Completion& c) {
  auto& st = *static_cast<ClientState*>(c.tag);
  st.probe_out = false;
  if (c.errc != rpc::Errc::kOk || c.resp_size != kProbeBytes) {
    if (!st.stopping) st.errors++;
    return;
  }
  st.probe_rtt.record(static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - st.probe_sent).count()));
}

int run_client(const Options& opt) {
  bench::install_stop_signals();
  rpc::Nexus nexus(bench::make_nexus_config(opt.ep, bench::client_nexus_uri(opt.ep)));
  bench::ConnectWatch watch;
  rpc::RpcConfig config = bench::make_rpc_config(opt.ep, 0, &watch);
  rpc::Rpc rpc(nexus, config);
  auto st_owner = std::make_unique<ClientState>();  // the histogram is 35 KB
  ClientState& st = *st_owner;
  auto connect = [&]() {
    auto sn = rpc.create_session(*opt.ep.server_uri, 0);
    if (!sn) throw RunError("create_session: " + sn.error());
    const auto deadline = Clock::now() + bench::kConnectTimeout;
    while (!rpc.is_connected(*sn)) {
      if (watch.failed || Clock::now() > deadline) throw RunError("cannot connect to the server");
      rpc.run_event_loop_once();
    }
    return *sn;
  };
  st.bulk_sn = connect();
  st.probe_sn = connect();
  st.bulk_req = rpc.alloc_msg_buffer(opt.bulk_size);
  st.bulk_resp = rpc.alloc_msg_buffer(kBulkRespBytes);
  st.probe_req = rpc.alloc_msg_buffer(kProbeBytes);
  st.probe_resp = rpc.alloc_msg_buffer(kProbeBytes);
  if (!st.bulk_req.valid() || !st.bulk_resp.valid() || !st.probe_req.valid() ||
      !st.probe_resp.valid()) {
    throw RunError("cannot allocate the request buffers");
  }
  std::fill_n(st.bulk_req.data(), opt.bulk_size, uint8_t{0x42});
  std::fill_n(st.probe_req.data(), kProbeBytes, uint8_t{0x17});

  bench::RunChecks checks(opt.idle_sleep_us == 0 ? 1 : 0);
  const auto start = Clock::now();
  const auto end = start + std::chrono::duration<double>(opt.duration_s);
  if (rpc.enqueue_request(st.bulk_sn, kBulkType, st.bulk_req, st.bulk_resp, bulk_done, &st) !=
      rpc::Errc::kOk) {
    throw RunError("the first bulk request was refused");
  }
  auto next_probe = start;
  const auto probe_interval = std::chrono::microseconds(opt.probe_interval_us);
  while (Clock::now() < end && !bench::stop_requested()) {
    const auto now = Clock::now();
    if (!st.probe_out && now >= next_probe) {
      st.probe_out = true;
      st.probe_sent = now;
      next_probe = now + probe_interval;
      if (rpc.enqueue_request(st.probe_sn, kProbeType, st.probe_req, st.probe_resp, probe_done,
                              &st) != rpc::Errc::kOk) {
        st.errors++;
        st.probe_out = false;
      }
    }
    poll(rpc, opt);
  }
  const double elapsed_s = std::chrono::duration<double>(Clock::now() - start).count();
  const uint64_t bulk_in_time = st.bulk_done;
  st.stopping = true;
  // Let what is in flight finish for a while, so that the server's end is
  // not left busy; ~Rpc fails what is still outstanding after that.
  const auto drain_end = Clock::now() + std::chrono::seconds(2);
  while ((st.probe_out || st.bulk_done == bulk_in_time) && Clock::now() < drain_end) {
    poll(rpc, opt);
  }
  const double goodput_mbps =
      static_cast<double>(bulk_in_time * opt.bulk_size) * 8 / 1e6 / elapsed_s;
  const double p50 = st.probe_rtt.percentile_us(50);
  const double p99 = st.probe_rtt.percentile_us(99);
  const double p999 = st.probe_rtt.percentile_us(99.9);
  const rpc::RpcStats& s = rpc.stats();
  fmt::print(
      "client {}: bulk {} x {} B in {:.2f} s = {:.1f} Mbit/s; probes {} rtt p50 {:.1f} us rtt p99 "
      "{:.1f} us rtt p99.9 {:.1f} us; {} retransmissions ({} spurious), {} errors; bulk session "
      "rate {} "
      "Mbit/s, srtt {} "
      "us, {} paced\n",
      nexus.uri(), bulk_in_time, opt.bulk_size, elapsed_s, goodput_mbps, st.probe_rtt.count(), p50,
      p99, p999, s.retransmissions, s.spurious_retransmissions, st.errors,
      rpc.session_stats(st.bulk_sn)->cc_rate_mbps, rpc.session_stats(st.bulk_sn)->srtt_us,
      rpc.session_stats(st.bulk_sn)->cc_paced_pkts);
  checks.point_end("", s.retransmissions, &st.probe_rtt);
  checks.finish();
  measure::Json settings = bench::endpoint_config(opt.ep);
  settings["probe_interval_us"] = opt.probe_interval_us;
  settings["idle_sleep_us"] = opt.idle_sleep_us;
  measure::ResultFile file = checks.result_file(
      opt.ep.transport, "incast", "one incast client (bench/incast.sh)", std::move(settings));
  measure::Json r;
  r["client"] = nexus.uri();
  r["bulk_size"] = opt.bulk_size;
  r["bulk_completed"] = bulk_in_time;
  r["duration_s"] = measure::round_to(elapsed_s);
  r["goodput_mbps"] = measure::round_to(goodput_mbps);
  r["probes"] = st.probe_rtt.count();
  measure::add_rtt_fields(r, st.probe_rtt, /*with_cdf=*/false, "probe_rtt");
  r["retransmissions"] = s.retransmissions;
  r["errors"] = st.errors;
  file.results.push_back(std::move(r));
  bench::write_outputs(opt.out, file);
  rpc.free_msg_buffer(st.bulk_req);
  rpc.free_msg_buffer(st.bulk_resp);
  rpc.free_msg_buffer(st.probe_req);
  rpc.free_msg_buffer(st.probe_resp);
  return st.errors == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app(
      "One host of the incast scenario: clients send bulk requests through one bottleneck to "
      "one server and probe its latency",
      std::string(kProgram));
  Options opt;
  add_options(app, opt);
  return bench::run_main(app, argc, argv, [&] {
    check_options(opt, app);
    return opt.ep.mode == Mode::kServer ? run_server(opt) : run_client(opt);
  });
}
