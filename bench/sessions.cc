// librpc session-scale benchmark: many client sessions on one server Rpc.
// Client threads (an Rpc each) open N sessions in all to one server Rpc,
// keeping at most --connect-window connects outstanding per thread, then
// keep --outstanding small requests in flight per thread, each sent on the
// next session in turn, so that every session carries traffic. Reported: the
// connect rate, the server's resident memory per session (idle, right
// after the connects; and after every session has carried traffic), the
// request rate with all N sessions in use, and the server's ring
// admission (sessions whose credits the RX ring backs, and those admitted
// beyond it: docs/design.md, "Sessions and ring room").
//
//   sessions [--sessions N] [--client-threads M] ...
//       both mode (default): starts the server as a child process (this
//       program in server mode) on 127.0.0.1, so that its memory is its own
//   sessions --mode server --server-uri HOST:PORT [--server-ring R]
//       [--server-max-sessions X]: one server Rpc (rpc_id 0) until
//       SIGINT/SIGTERM; prints "ready URI" when it serves and one "stats"
//       line when it ends
//   sessions --mode client --server-uri HOST:PORT ...: load a running
//       server (no memory figures)
//
// Any failed connect or request makes the exit status 1.

#include <fmt/core.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/args.h"
#include "common/connect.h"
#include "common/handlers.h"
#include "common/program.h"
#include "common/report.h"
#include "librpc/rpc_all.h"

namespace {

using bench::Mode;
using bench::RunError;
using Clock = std::chrono::steady_clock;

constexpr std::string_view kProgram = "sessions";
constexpr std::size_t kDefaultSessions = 1000;
constexpr std::size_t kDefaultConnectWindow = 512;
constexpr std::size_t kDefaultSize = 32;
constexpr std::size_t kDefaultOutstanding = 256;
constexpr double kDefaultDurationS = 2;
constexpr std::size_t kMaxSessions = 65535;  // SessionNum is 16 bits
constexpr std::size_t kMaxThreads = 64;
constexpr auto kPhaseTimeout = std::chrono::seconds(60);

struct Options {
  bench::EndpointOptions ep;
  std::size_t sessions = kDefaultSessions;
  std::size_t client_threads = 1;
  std::size_t connect_window = kDefaultConnectWindow;
  std::size_t size = kDefaultSize;
  std::size_t outstanding = kDefaultOutstanding;  // per client thread; 0: one per session
  double duration_s = kDefaultDurationS;
  std::size_t server_ring = 0;          // 0: RpcConfig's default
  std::size_t server_max_sessions = 0;  // 0: sessions + 16
  bench::OutputPaths out;
};

void add_options(CLI::App& app, Options& opt) {
  bench::configure_app(app);
  app.footer(
      "Both mode (the default) runs the server as a child process of this one; server mode "
      "runs one server Rpc until SIGINT/SIGTERM; client mode loads --server-uri.");
  bench::add_endpoint_options(app, opt.ep);
  app.add_option("--sessions", opt.sessions,
                 "sessions in all (also the server's default max_sessions in both mode)")
      ->check(CLI::Range(std::size_t{1}, kMaxSessions));
  app.add_option("--server-ring", opt.server_ring,
                 "server RpcConfig::rx_ring_size (0: the library's, 4096)")
      ->check(CLI::Range(std::size_t{8}, std::size_t{1} << 20));
  app.add_option("--server-max-sessions", opt.server_max_sessions,
                 "server RpcConfig::max_sessions (0: --sessions + 16)")
      ->check(CLI::Range(std::size_t{1}, kMaxSessions));
  CLI::App& client = *app.add_option_group("Client", "The load (client and both mode)");
  client
      .add_option("--client-threads", opt.client_threads,
                  "client threads, an Rpc each; the sessions are split evenly")
      ->check(CLI::Range(std::size_t{1}, kMaxThreads));
  client
      .add_option("--connect-window", opt.connect_window, "connects outstanding per client thread")
      ->check(CLI::Range(std::size_t{1}, kMaxSessions));
  measure::add_size_option(client, "--size", opt.size, "request and response size", 0,
                           std::size_t{1} << 20);
  client
      .add_option("--outstanding", opt.outstanding,
                  "requests in flight per client thread (0: one per session), each sent on the "
                  "next session in turn so that every session carries traffic")
      ->check(CLI::Range(std::size_t{0}, kMaxSessions));
  client.add_option("--duration", opt.duration_s, "traffic phase")
      ->check(measure::positive_double())
      ->type_name("SECONDS");
  bench::add_output_options(client, opt.out);
}

void check_options(const Options& opt, const CLI::App& app) {
  bench::check_endpoint_options(opt.ep, bench::any_given(*app.get_option_group("Client")),
                                "--client-threads/--connect-window/--size/--outstanding/"
                                "--duration/--json/--csv");
  if (opt.sessions < opt.client_threads) {
    throw bench::UsageError("--sessions must be at least --client-threads");
  }
}

std::size_t server_max_sessions(const Options& opt) {
  return opt.server_max_sessions != 0 ? opt.server_max_sessions
                                      : std::min(opt.sessions + 16, kMaxSessions);
}

// ---------------------------------------------------------------- server

int run_server(const Options& opt) {
  bench::install_stop_signals();
  rpc::Nexus nexus(bench::make_nexus_config(opt.ep, *opt.ep.server_uri));
  bench::register_bench_handlers(nexus);
  bench::ServerCounters counters;
  rpc::RpcConfig config = bench::make_rpc_config(opt.ep, 0);
  if (opt.server_ring != 0) config.rx_ring_size = opt.server_ring;
  config.max_sessions = server_max_sessions(opt);
  // Every client thread runs on one host here: the server is made for it
  // (RpcConfig::max_sessions_per_host, by default half of max_sessions).
  config.max_sessions_per_host = config.max_sessions;
  config.context = &counters;
  rpc::Rpc rpc(nexus, config);
  fmt::print("ready {}\n", nexus.uri());
  std::fflush(stdout);
  while (!bench::stop_requested()) rpc.run_event_loop_once();
  const rpc::RpcStats& s = rpc.stats();
  fmt::print(
      "stats sessions={} ring_entries_reserved={} ring_credits_overcommitted={} "
      "rx_ring_full={} handlers_run={} duplicate_requests={}\n",
      rpc.num_active_sessions(), s.ring_entries_reserved, s.ring_credits_overcommitted,
      s.drops.rx_ring_full, s.handlers_run, s.duplicate_requests);
  std::fflush(stdout);
  return 0;
}

// The server as a child process: this program in server mode, its stdout a
// pipe that says when it serves (and where) and, at the end, its stats.
class ServerProcess {
 public:
  explicit ServerProcess(const Options& opt) {
    int fds[2];
    if (::pipe(fds) != 0) throw RunError("pipe failed");
    std::vector<std::string> args = {"/proc/self/exe",
                                     "--mode",
                                     "server",
                                     "--server-uri",
                                     "127.0.0.1:0",
                                     "--transport",
                                     opt.ep.transport,
                                     "--sessions",
                                     std::to_string(opt.sessions),
                                     "--server-max-sessions",
                                     std::to_string(server_max_sessions(opt))};
    if (opt.server_ring != 0) {
      args.insert(args.end(), {"--server-ring", std::to_string(opt.server_ring)});
    }
    if (opt.ep.session_credits != 0) {
      args.insert(args.end(), {"--credits", std::to_string(opt.ep.session_credits)});
    }
    pid_ = ::fork();
    if (pid_ < 0) throw RunError("fork failed");
    if (pid_ == 0) {
      ::dup2(fds[1], STDOUT_FILENO);
      ::close(fds[0]);
      ::close(fds[1]);
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      std::_Exit(127);
    }
    ::close(fds[1]);
    out_ = ::fdopen(fds[0], "r");
    const std::string ready = read_line();
    if (ready.rfind("ready ", 0) != 0) {
      throw RunError("the server process did not start (it said: '" + ready + "')");
    }
    uri_ = ready.substr(6);
  }
  ~ServerProcess() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (out_ != nullptr) std::fclose(out_);
  }
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  const std::string& uri() const { return uri_; }
  // Resident memory now (VmRSS), in bytes.
  std::size_t rss_bytes() const {
    std::ifstream status(fmt::format("/proc/{}/status", pid_));
    std::string line;
    while (std::getline(status, line)) {
      if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
    }
    throw RunError("cannot read the server's VmRSS");
  }
  // Stops it and returns its "stats ..." line.
  std::string stop() {
    ::kill(pid_, SIGTERM);
    const std::string stats = read_line();
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
    return stats;
  }

 private:
  std::string read_line() {
    char buf[512];
    if (std::fgets(buf, sizeof(buf), out_) == nullptr) return {};
    std::string line(buf);
    while (!line.empty() && line.back() == '\n') line.pop_back();
    return line;
  }

  pid_t pid_ = -1;
  std::FILE* out_ = nullptr;
  std::string uri_;
};

// ---------------------------------------------------------------- clients

// One client thread: its Rpc, its share of the sessions, and its requests
// in flight, each sent next on the session after the last one used (round
// robin), so that every session carries traffic.
struct ClientThread {
  struct Request {
    ClientThread* owner = nullptr;
    rpc::MsgBuffer req;
    rpc::MsgBuffer resp;
  };

  std::size_t sessions = 0;
  std::size_t connected = 0;
  std::size_t failed = 0;  // connects that failed
  std::size_t resets = 0;  // sessions reset after they connected
  bool counting = true;    // false once the run is over (the server's end resets them)
  std::uint64_t completed = 0;
  std::uint64_t errors = 0;
  std::uint64_t retransmissions = 0;
  double connect_s = 0;
  std::size_t sessions_used = 0;  // sessions that carried a request
  bool stop_traffic = false;
  std::vector<rpc::SessionNum> live;  // connected sessions, in round-robin order
  std::size_t next = 0;               // the next session of `live` to send on
  std::vector<std::uint8_t> used;     // per entry of `live`: carried a request

  rpc::SessionNum next_session() {
    const std::size_t i = next;
    next = next + 1 == live.size() ? 0 : next + 1;
    used[i] = 1;
    return live[i];
  }
  bool send(rpc::Rpc& rpc, Request& r) {
    return rpc.enqueue_request(next_session(), bench::kEchoType, r.req, r.resp, on_done, &r) ==
           rpc::Errc::kOk;
  }

  static void on_done(rpc::Rpc& rpc, const rpc::Completion& c) {
    auto* r = static_cast<Request*>(c.tag);
    ClientThread& t = *r->owner;
    if (c.errc != rpc::Errc::kOk) {
      t.errors++;
      return;
    }
    t.completed++;
    if (t.stop_traffic) return;
    if (!t.send(rpc, *r)) t.errors++;
  }
};

struct Phases {
  std::atomic<int> ready{0};  // threads connected (or failed)
  std::atomic<bool> go_traffic{false};
  std::atomic<bool> end_traffic{false};
  std::atomic<int> drained{0};  // threads whose last requests completed
  std::atomic<bool> finish{false};
};

void client_main(const Options& opt, const std::string& server_uri, rpc::Nexus& nexus,
                 rpc::RpcId id, ClientThread& t, Phases& phases, Clock::time_point start) {
  rpc::RpcConfig config = bench::make_rpc_config(opt.ep, id);
  config.max_sessions = t.sessions + 16;
  config.session_callback = [&t](rpc::SessionNum, rpc::SessionEvent e, rpc::SmErr) {
    if (e == rpc::SessionEvent::kConnected) t.connected++;
    if (e == rpc::SessionEvent::kConnectFailed) t.failed++;
    if (e == rpc::SessionEvent::kReset && t.counting) t.resets++;
  };
  rpc::Rpc rpc(nexus, config);
  std::vector<rpc::SessionNum> sns;
  sns.reserve(t.sessions);
  // Connect, at most connect_window outstanding.
  std::this_thread::sleep_until(start);
  const auto t0 = Clock::now();
  while (t.connected + t.failed < t.sessions && Clock::now() - t0 < kPhaseTimeout) {
    while (sns.size() < t.sessions && sns.size() - t.connected - t.failed < opt.connect_window) {
      auto sn = rpc.create_session(server_uri, 0);
      if (!sn) throw RunError("create_session: " + sn.error());
      sns.push_back(*sn);
    }
    rpc.run_event_loop_once();
  }
  t.connect_s = std::chrono::duration<double>(Clock::now() - t0).count();
  phases.ready++;
  // Idle until the memory is measured, then requests round robin.
  while (!phases.go_traffic) rpc.run_event_loop(std::chrono::microseconds(1000));
  for (rpc::SessionNum sn : sns) {
    if (rpc.is_connected(sn)) t.live.push_back(sn);
  }
  t.used.assign(t.live.size(), 0);
  const std::size_t in_flight =
      std::min(opt.outstanding == 0 ? t.live.size() : opt.outstanding, t.live.size());
  std::vector<ClientThread::Request> reqs(in_flight);
  for (ClientThread::Request& r : reqs) {
    r.owner = &t;
    r.req = rpc.alloc_msg_buffer(opt.size);
    r.resp = rpc.alloc_msg_buffer(opt.size);
    if (!r.req.valid() || !r.resp.valid()) throw RunError("cannot allocate request buffers");
    bench::fill_pattern(r.req);
    if (!t.send(rpc, r)) t.errors++;
  }
  while (!phases.end_traffic) rpc.run_event_loop_once();
  // Counted completions end with the phase; the last requests drain here.
  const std::uint64_t counted = t.completed;
  const std::uint64_t errors_before = t.errors;
  t.stop_traffic = true;
  const auto drain_end = Clock::now() + kPhaseTimeout;
  while (t.completed - counted + t.errors - errors_before < reqs.size() &&
         Clock::now() < drain_end) {
    rpc.run_event_loop_once();
  }
  t.sessions_used = static_cast<std::size_t>(std::count(t.used.begin(), t.used.end(), 1));
  t.completed = counted;
  t.counting = false;
  t.retransmissions = rpc.stats().retransmissions;
  phases.drained++;
  while (!phases.finish) rpc.run_event_loop(std::chrono::microseconds(1000));
  for (ClientThread::Request& r : reqs) {
    rpc.free_msg_buffer(r.req);
    rpc.free_msg_buffer(r.resp);
  }
}

int run_clients(const Options& opt) {
  std::optional<ServerProcess> server;
  std::string server_uri;
  if (opt.ep.mode == Mode::kBoth) {
    server.emplace(opt);
    server_uri = server->uri();
  } else {
    server_uri = *opt.ep.server_uri;
  }
  const std::size_t rss_start = server ? server->rss_bytes() : 0;
  // Busy-polling: the client threads, and the server's in both mode.
  bench::RunChecks checks(static_cast<int>(opt.client_threads) + (server ? 1 : 0));
  rpc::Nexus nexus(bench::make_nexus_config(
      opt.ep, opt.ep.mode == Mode::kBoth ? "127.0.0.1:0" : bench::client_nexus_uri(opt.ep)));

  std::vector<ClientThread> threads(opt.client_threads);
  for (std::size_t i = 0; i < threads.size(); i++) {
    threads[i].sessions = opt.sessions / threads.size() + (i < opt.sessions % threads.size());
  }
  Phases phases;
  const auto start = Clock::now() + std::chrono::milliseconds(100);
  std::vector<std::thread> workers;
  std::vector<std::exception_ptr> errors(threads.size());
  for (std::size_t i = 0; i < threads.size(); i++) {
    workers.emplace_back([&, i] {
      try {
        client_main(opt, server_uri, nexus, static_cast<rpc::RpcId>(i), threads[i], phases, start);
      } catch (...) {
        errors[i] = std::current_exception();
        phases.ready++;
        phases.drained++;
      }
    });
  }
  auto wait_for = [&](std::atomic<int>& counter) {
    while (counter < static_cast<int>(threads.size())) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  };
  wait_for(phases.ready);
  // The server is idle (its clients are not sending) when its memory is read.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const std::size_t rss_idle = server ? server->rss_bytes() : 0;
  phases.go_traffic = true;
  const auto traffic_start = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(opt.duration_s));
  phases.end_traffic = true;
  const double traffic_s = std::chrono::duration<double>(Clock::now() - traffic_start).count();
  wait_for(phases.drained);
  const std::size_t rss_used = server ? server->rss_bytes() : 0;
  // The server's stats while every session is still there.
  const std::string server_stats = server ? server->stop() : std::string();
  phases.finish = true;
  for (std::thread& w : workers) w.join();
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }

  std::size_t connected = 0, failed = 0, resets = 0, used = 0;
  std::uint64_t completed = 0, errs = 0, retransmissions = 0;
  double connect_s = 0;
  for (const ClientThread& t : threads) {
    connected += t.connected;
    failed += t.failed;
    resets += t.resets;
    used += t.sessions_used;
    completed += t.completed;
    errs += t.errors;
    retransmissions += t.retransmissions;
    connect_s = std::max(connect_s, t.connect_s);
  }
  const auto as_double = [](std::uint64_t v) { return static_cast<double>(v); };
  const double n = as_double(opt.sessions);
  const double connect_rate = as_double(connected) / connect_s;
  const double rps = as_double(completed) / traffic_s;
  const double idle_per_session = (as_double(rss_idle) - as_double(rss_start)) / n;
  const double used_per_session = (as_double(rss_used) - as_double(rss_start)) / n;
  fmt::print("{} sessions from {} client thread(s), transport {}\n", opt.sessions, threads.size(),
             opt.ep.transport);
  const rpc::NexusStats sm = nexus.stats();
  fmt::print("  connected {} (failed {}) in {:.3f} s: {:.0f} sessions/s ({} SM retransmissions)\n",
             connected, failed, connect_s, connect_rate, sm.retransmissions);
  if (server) {
    fmt::print(
        "  server RSS: {:.1f} MiB at start; per session {:.0f} B idle, {:.0f} B after "
        "traffic\n",
        as_double(rss_start) / 1048576.0, idle_per_session, used_per_session);
    fmt::print("  server {}\n", server_stats);
  }
  fmt::print(
      "  {} B requests, {} in flight per thread, round robin: {:.0f} req/s over "
      "{:.2f} s, {} sessions used, {} retransmissions, {} errors, {} sessions reset\n",
      opt.size,
      opt.outstanding == 0 ? std::string("one per session") : std::to_string(opt.outstanding), rps,
      traffic_s, used, retransmissions, errs, resets);
  checks.point_end("", retransmissions);
  checks.finish();
  measure::Json config = bench::endpoint_config(opt.ep);
  config["server_rx_ring_size"] =
      opt.server_ring != 0 ? opt.server_ring : rpc::RpcConfig{}.rx_ring_size;
  config["server_max_sessions"] = server_max_sessions(opt);
  measure::ResultFile file =
      checks.result_file(opt.ep.transport, "sessions",
                         server ? "server in a child process on 127.0.0.1, clients in this process"
                                : "server at " + server_uri,
                         std::move(config));
  measure::Json r;
  r["sessions"] = opt.sessions;
  r["client_threads"] = threads.size();
  r["connect_window"] = opt.connect_window;
  r["connected"] = connected;
  r["connect_failed"] = failed;
  r["connect_s"] = measure::round_to(connect_s);
  r["connect_per_s"] = measure::round_to(connect_rate, 0);
  r["req_size"] = opt.size;
  r["outstanding_per_thread"] = opt.outstanding;
  r["sessions_used"] = used;
  r["traffic_s"] = measure::round_to(traffic_s);
  r["rps"] = measure::round_to(rps, 0);
  r["retransmissions"] = retransmissions;
  r["errors"] = errs;
  r["sessions_reset"] = resets;
  if (server) {
    r["server_rss_start_bytes"] = rss_start;
    r["server_rss_per_idle_session_bytes"] = measure::round_to(idle_per_session, 0);
    r["server_rss_per_used_session_bytes"] = measure::round_to(used_per_session, 0);
    r["server_stats"] = server_stats;
  }
  file.results.push_back(std::move(r));
  bench::write_outputs(opt.out, file);
  return failed == 0 && errs == 0 && resets == 0 && connected == opt.sessions ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app(
      "librpc with many sessions on one server Rpc: connect rate, server memory per session, "
      "request rate with every session active",
      std::string(kProgram));
  Options opt;
  add_options(app, opt);
  return bench::run_main(app, argc, argv, [&] {
    check_options(opt, app);
    if (opt.ep.mode == Mode::kServer) return run_server(opt);
    return run_clients(opt);
  });
}
