// Soak benchmark (not part of CI): runs echo RPCs of mixed sizes for a long
// time with injected TX loss on both ends, checks every byte, and reports
// requests completed, handler executions, retransmissions and resident
// memory at start and end. A handler that ran twice for one request, a
// corrupted response, an error or a memory leak shows up here.
//
//   soak [--duration SECONDS] [--loss FRACTION] [--window N] [--json FILE]
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

namespace {

using bench::UsageError;

constexpr std::string_view kProgram = "soak";
constexpr double kDefaultDurationS = 60;
constexpr double kDefaultLoss = 0.01;
constexpr size_t kDefaultWindow = 8;
constexpr size_t kMaxWindow = 4096;

void print_usage(std::FILE* out) {
  fmt::print(out,
             "usage: soak [options]\n"
             "\n"
             "Echo RPCs of mixed sizes (16 B .. 64 KiB) between two Rpcs of this process,\n"
             "with TX loss injected at both ends; checks every byte and reports\n"
             "retransmissions and resident memory. Exits 1 on any error or bad data.\n"
             "\n"
             "  --duration SECONDS   how long to send requests (default {})\n"
             "  --loss FRACTION      fraction of packets each end drops on TX, in [0, 1)\n"
             "                       (default {})\n"
             "  --window N           requests in flight, 1..{} (default {})\n"
             "  --json FILE          also write the results as JSON to FILE\n"
             "  -h, --help           show this help\n",
             kDefaultDurationS, kDefaultLoss, kMaxWindow, kDefaultWindow);
}

struct Options {
  double duration_s = kDefaultDurationS;
  double loss = kDefaultLoss;
  size_t window = kDefaultWindow;
  std::string json;
  bool help = false;
};

// A number in [0, 1).
double parse_fraction(std::string_view flag, std::string_view text) {
  const std::string copy(text);
  char* end = nullptr;
  const double value = std::strtod(copy.c_str(), &end);
  if (copy.empty() || end != copy.c_str() + copy.size() || !(value >= 0 && value < 1)) {
    throw UsageError(fmt::format("{}: '{}' is not a number in [0, 1)", flag, text));
  }
  return value;
}

Options parse_args(int argc, char** argv) {
  static constexpr std::string_view kValued[] = {"--duration", "--loss", "--window", "--json"};
  Options opt;
  for (const bench::Flag& f : bench::split_flags(argc, argv, kValued, {})) {
    if (f.name == "--help") {
      opt.help = true;
      return opt;
    }
    if (f.name == "--duration") {
      opt.duration_s = bench::parse_positive_double(f.name, f.value);
    } else if (f.name == "--loss") {
      opt.loss = parse_fraction(f.name, f.value);
    } else if (f.name == "--window") {
      opt.window = static_cast<size_t>(bench::parse_unsigned(f.name, f.value, 1, kMaxWindow));
    } else if (f.name == "--json") {
      opt.json = bench::parse_path(f.name, f.value);
    } else {
      // The endpoint flags the other programs take: soak runs in-process.
      throw UsageError(fmt::format("unknown option '{}'", f.name));
    }
  }
  return opt;
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
  const std::string& json = opt.json;
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
  if (!json.empty()) {
    std::ofstream out(json);
    out << "{\"duration_s\":" << duration_s << ",\"loss\":" << loss << ",\"window\":" << window
        << ",\"completed\":" << cl.completed << ",\"handler_runs\":" << runs
        << ",\"errors\":" << cl.errors << ",\"bad_data\":" << cl.bad_data
        << ",\"retransmissions\":" << client_stats.retransmissions
        << ",\"rss_start_kib\":" << rss_start_kib << ",\"rss_end_kib\":" << rss_end_kib << "}\n";
  }
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  return bench::run_main(kProgram, print_usage, [&] {
    const Options opt = parse_args(argc, argv);
    if (opt.help) {
      print_usage(stdout);
      return 0;
    }
    return run(opt);
  });
}
