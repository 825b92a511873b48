// Soak benchmark (not part of CI): runs echo RPCs of mixed sizes for a long
// time with injected TX loss on both ends, checks every byte, and reports
// requests completed, handler executions, retransmissions and resident
// memory at start and end. A handler that ran twice for one request, a
// corrupted response, an error or a memory leak shows up here.
//
//   soak [--duration SECONDS] [--loss FRACTION] [--window N] [--json FILE] [--csv FILE]
#include <fmt/core.h>
#include <librpc/rpc_all.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/args.h"
#include "common/program.h"
#include "common/report.h"

namespace {

constexpr std::string_view kProgram = "soak";
constexpr double kDefaultDurationS = 60;
constexpr double kDefaultLoss = 0.01;
constexpr size_t kDefaultWindow = 8;
constexpr size_t kMaxWindow = 4096;

struct Options {
  double duration_s = kDefaultDurationS;
  double loss = kDefaultLoss;
  size_t window = kDefaultWindow;
  bench::OutputPaths out;
};

// The endpoint options the other programs take do not apply: soak runs
// both Rpcs in this process over udp.
void add_options(CLI::App& app, Options& opt) {
  bench::configure_app(app);
  app.footer("Exits 1 on any error or bad data.");
  app.add_option("--duration", opt.duration_s, "how long to send requests")
      ->check(measure::positive_double())
      ->type_name("SECONDS");
  app.add_option("--loss", opt.loss, "fraction of packets each end drops on TX")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            char* end = nullptr;
            const double v = std::strtod(text.c_str(), &end);
            if (text.empty() || end != text.c_str() + text.size() || !(v >= 0 && v < 1)) {
              return "'" + text + "' is not a number in [0, 1)";
            }
            return "";
          },
          ""))
      ->type_name("FRACTION");
  app.add_option("--window", opt.window, "requests in flight")
      ->check(CLI::Range(size_t{1}, kMaxWindow));
  bench::add_output_options(app, opt.out);
}

constexpr rpc::ReqType kEcho = 1;
constexpr size_t kSizes[] = {16, 32, 1000, 1456, 1457, 5000, 20000, 65536};
std::atomic<uint64_t> g_handler_runs{0};

size_t rss_kib() {
  std::ifstream statm("/proc/self/statm");
  size_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<size_t>(sysconf(_SC_PAGESIZE)) / 1024;
}

uint8_t pattern(uint64_t id, size_t i) { return static_cast<uint8_t>(id * 131 + i * 7); }

void echo(rpc::ReqHandle& h) {
  g_handler_runs.fetch_add(1, std::memory_order_relaxed);
  const rpc::MsgBuffer& req = h.request();
  rpc::MsgBuffer& pre = h.pre_resp_buffer();
  if (req.size() <= pre.max_size()) {
    std::memcpy(pre.data(), req.data(), req.size());
    pre.resize(req.size());
    h.rpc().enqueue_response(h, pre);
    return;
  }
  rpc::MsgBuffer resp = h.rpc().alloc_msg_buffer(req.size());  // the Rpc frees it
  std::memcpy(resp.data(), req.data(), req.size());
  h.rpc().enqueue_response(h, resp);
}

struct Slot;
struct Client {
  rpc::SessionNum sn = 0;
  uint64_t next_id = 0;
  uint64_t completed = 0, errors = 0, bad_data = 0;
  bool stopping = false;
  size_t in_flight = 0;
};
struct Slot {
  Client* client;
  rpc::MsgBuffer req, resp;
  uint64_t id = 0;
};

void send(rpc::Rpc& rpc, Slot& s);

void on_done(rpc::Rpc& rpc, const rpc::Completion& c) {
  auto& s = *static_cast<Slot*>(c.tag);
  Client& cl = *s.client;
  cl.in_flight--;
  if (c.errc != rpc::Errc::kOk) {
    cl.errors++;
  } else {
    bool ok = c.resp_size == s.req.size();
    for (size_t i = 0; ok && i < c.resp_size; i++) ok = s.resp.data()[i] == pattern(s.id, i);
    ok ? cl.completed++ : cl.bad_data++;
  }
  if (!cl.stopping) send(rpc, s);
}

void send(rpc::Rpc& rpc, Slot& s) {
  Client& cl = *s.client;
  s.id = cl.next_id++;
  s.req.resize(kSizes[s.id % std::size(kSizes)]);
  for (size_t i = 0; i < s.req.size(); i++) s.req.data()[i] = pattern(s.id, i);
  if (rpc.enqueue_request(cl.sn, kEcho, s.req, s.resp, on_done, &s) == rpc::Errc::kOk) {
    cl.in_flight++;
  } else {
    cl.errors++;
  }
}

int run(const Options& opt) {
  const double duration_s = opt.duration_s;
  const double loss = opt.loss;
  const size_t window = opt.window;
  rpc::Nexus nexus({.uri = "127.0.0.1:0"});
  if (!nexus.register_handler(kEcho, echo)) return 1;
  const rpc::RpcConfig base{.rto_us = 2000, .drop_tx_fraction = loss};
  std::atomic<bool> stop{false};
  rpc::RpcStats server_stats;
  std::atomic<bool> server_ready{false};
  std::thread server([&] {
    rpc::RpcConfig c = base;
    c.rpc_id = 1;
    rpc::Rpc rpc(nexus, c);
    server_ready = true;
    while (!stop.load(std::memory_order_relaxed)) rpc.run_event_loop_once();
    server_stats = rpc.stats();
  });
  while (!server_ready) std::this_thread::yield();
  rpc::RpcConfig cc = base;
  cc.rpc_id = 0;
  rpc::Rpc rpc(nexus, cc);
  Client cl;
  auto sn = rpc.create_session(nexus.uri(), 1);
  if (!sn) return 1;
  cl.sn = *sn;
  std::vector<Slot> slots(window);
  for (Slot& s : slots) {
    s.client = &cl;
    s.req = rpc.alloc_msg_buffer(65536);
    s.resp = rpc.alloc_msg_buffer(65536);
  }
  for (Slot& s : slots) send(rpc, s);
  const size_t rss_start_kib = rss_kib();
  bench::RunChecks checks(/*busy_cores=*/2);
  std::printf(
      "soak: %.0f s, %.1f%% TX loss at both ends, window %zu, sizes 16 B..64 KiB, RSS %zu KiB\n",
      duration_s, loss * 100, window, rss_start_kib);
  const auto t0 = std::chrono::steady_clock::now();
  auto next_report = t0 + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() - t0 < std::chrono::duration<double>(duration_s)) {
    rpc.run_event_loop_once();
    if (std::chrono::steady_clock::now() >= next_report) {
      next_report += std::chrono::seconds(10);
      std::printf("soak: %lu completed, %lu retransmissions, RSS %zu KiB\n",
                  static_cast<unsigned long>(cl.completed),
                  static_cast<unsigned long>(rpc.stats().retransmissions), rss_kib());
      std::fflush(stdout);
    }
  }
  cl.stopping = true;
  const auto drain_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (cl.in_flight > 0 && std::chrono::steady_clock::now() < drain_deadline) {
    rpc.run_event_loop_once();
  }
  const size_t rss_end_kib = rss_kib();
  const rpc::RpcStats client_stats = rpc.stats();
  for (Slot& s : slots) {
    rpc.free_msg_buffer(s.req);
    rpc.free_msg_buffer(s.resp);
  }
  stop = true;
  server.join();
  const uint64_t runs = g_handler_runs.load();
  const bool ok = cl.errors == 0 && cl.bad_data == 0 && cl.in_flight == 0 && runs == cl.completed;
  std::printf(
      "soak: requests completed %lu, handler executions %lu, errors %lu, bad data %lu, "
      "client retransmissions %lu, server duplicates answered from cache %lu, "
      "TX dropped (client/server) %lu/%lu, RSS start %zu KiB end %zu KiB: %s\n",
      static_cast<unsigned long>(cl.completed), static_cast<unsigned long>(runs),
      static_cast<unsigned long>(cl.errors), static_cast<unsigned long>(cl.bad_data),
      static_cast<unsigned long>(client_stats.retransmissions),
      static_cast<unsigned long>(server_stats.duplicate_requests),
      static_cast<unsigned long>(client_stats.tx_dropped_injected),
      static_cast<unsigned long>(server_stats.tx_dropped_injected), rss_start_kib, rss_end_kib,
      ok ? "OK" : "FAILED");
  // Retransmissions are what the injected loss asks for: not a warning here.
  checks.point_end("", /*retransmissions=*/0);
  checks.finish();
  measure::Json config;
  config["transport"] = "udp";
  config["rto_us"] = base.rto_us;
  config["drop_tx_fraction"] = loss;
  config["window"] = window;
  measure::ResultFile file = checks.result_file(
      "udp", "soak", "client and server Rpc threads in one process on 127.0.0.1, not pinned",
      std::move(config));
  measure::Json r;
  r["duration_s"] = duration_s;
  r["loss"] = loss;
  r["window"] = window;
  r["completed"] = cl.completed;
  r["handler_runs"] = runs;
  r["errors"] = cl.errors;
  r["bad_data"] = cl.bad_data;
  r["retransmissions"] = client_stats.retransmissions;
  r["rss_start_kib"] = rss_start_kib;
  r["rss_end_kib"] = rss_end_kib;
  r["ok"] = ok;
  file.results.push_back(std::move(r));
  bench::write_outputs(opt.out, file);
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app(
      "Echo RPCs of mixed sizes (16 B .. 64 KiB) between two Rpcs of this process, with TX loss "
      "injected at both ends; checks every byte and reports retransmissions and resident memory",
      std::string(kProgram));
  Options opt;
  add_options(app, opt);
  return bench::run_main(app, argc, argv, [&] { return run(opt); });
}
