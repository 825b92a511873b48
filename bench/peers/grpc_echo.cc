// gRPC C++ unary echo: the peer a user would most likely pick instead of
// librpc, measured over TCP loopback and reported as bench/compare/SCHEMA.md
// JSON (system "grpc_sync" for latency, "grpc_async" for rate; --json,
// --csv), with the baselines' scaffold (bench/baselines/scaffold.h).
//
//   grpc_echo [both] [options]                 server and client in one process, 127.0.0.1
//   grpc_echo server [--bind IP:PORT] [--server-api sync|async] [--server-threads N]
//   grpc_echo client --server IP:PORT [options]
//
// Client, `--api sync` (default): blocking unary calls, one outstanding per
// client thread, each timed with std::chrono::steady_clock; nearest-rank
// round-trip percentiles per --size (measure::Histogram). `--api async`: a CompletionQueue client
// per client thread, on its own channel (its own HTTP/2 connection), keeping
// --outstanding calls in flight; completions counted over --duration seconds
// after --warmup-s seconds. Server, `--server-api async` (default): one
// ServerCompletionQueue per --server-threads thread, kArmedCallsPerCq calls
// armed on each. `--server-api sync`: gRPC's own thread pool runs the handler.
//
// In `both` mode the process pins itself to CPU 1 before starting the server,
// so the server's threads and the gRPC threads created with it run there, and
// each client thread pins itself to CPU 0 (threads gRPC spawns later from a
// client thread inherit CPU 0). `--no-pin` leaves every thread floating.

#include <fmt/core.h>
#include <grpcpp/grpcpp.h>
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cli.h"
#include "echo.grpc.pb.h"
#include "histogram.h"
#include "scaffold.h"

namespace {

using baseline::Clock;
using baseline::RunError;
using librpc::bench::EchoMessage;
using librpc::bench::EchoService;

constexpr std::size_t kMaxSize = 64u << 20;  // gRPC's receive limit is lifted to match
constexpr int kArmedCallsPerCq = 256;        // > the largest window we try, so none waits
constexpr auto kCallTimeout = std::chrono::seconds(5);
constexpr auto kConnectTimeout = std::chrono::seconds(5);

// gRPC deadlines take system_clock time points only.
std::chrono::system_clock::time_point deadline_after(std::chrono::seconds timeout) {
  return std::chrono::system_clock::now() + timeout;
}

enum class Api { kSync, kAsync };

struct Options {
  Api api = Api::kSync;
  Api server_api = Api::kAsync;
  std::vector<std::size_t> sizes{32};
  std::uint64_t iters = 50000;
  std::uint64_t warmup = 5000;
  std::vector<int> windows{8};
  double duration_s = 5.0;
  double warmup_s = 1.0;
  int client_threads = 1;
  int server_threads = 1;
  bool pin = true;
};

const std::map<std::string, Api> kApis{{"sync", Api::kSync}, {"async", Api::kAsync}};

void add_client_options(CLI::App& app, Options& opt) {
  app.add_option("--api", opt.api,
                 "sync: blocking calls, latency percentiles; async: CompletionQueue client, "
                 "request rate")
      ->transform(CLI::CheckedTransformer(kApis).description(""))
      ->type_name("sync|async")
      ->default_str("sync");
  measure::add_sizes_option(app, "--size", opt.sizes, "request = response payload bytes", 0,
                            kMaxSize)
      ->capture_default_str();
  app.add_option("--iters", opt.iters, "sync: measured calls per size and thread")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 30))
      ->capture_default_str();
  app.add_option("--warmup", opt.warmup, "sync: unmeasured calls first")
      ->check(CLI::Range(std::uint64_t{0}, std::uint64_t{1} << 30))
      ->capture_default_str();
  app.add_option("--outstanding", opt.windows, "async: calls in flight per channel")
      ->delimiter(',')
      ->check(CLI::Range(1, kArmedCallsPerCq))
      ->capture_default_str();
  baseline::add_interval_options(app, opt.duration_s, opt.warmup_s, "--warmup-s");
  app.add_option("--client-threads", opt.client_threads, "client threads, one channel each")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
}

void add_server_options(CLI::App& app, Options& opt) {
  app.add_option("--server-api", opt.server_api,
                 "sync: the handler on gRPC's thread pool; async: on our CompletionQueue threads")
      ->transform(CLI::CheckedTransformer(kApis).description(""))
      ->type_name("sync|async")
      ->default_str("async");
  app.add_option("--server-threads", opt.server_threads,
                 "async: CQ threads; sync: completion queues")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
}

// ---------------------------------------------------------------------------
// Servers

class SyncEchoService final : public EchoService::Service {
  grpc::Status Echo(grpc::ServerContext* /*ctx*/, const EchoMessage* req,
                    EchoMessage* resp) override {
    *resp = *req;
    return grpc::Status::OK;
  }
};

// One armed-or-answering call on an async server's completion queue; the
// completion queue's tag is the ServerCall itself.
struct ServerCall {
  ServerCall(EchoService::AsyncService& service, grpc::ServerCompletionQueue& cq)
      : responder(&ctx) {
    service.RequestEcho(&ctx, &request, &responder, &cq, &cq, this);
  }
  grpc::ServerContext ctx;
  EchoMessage request;
  grpc::ServerAsyncResponseWriter<EchoMessage> responder;
  bool answered = false;
};

// The echo server in either flavour. start() returns once it listens;
// stop() shuts it down and joins our threads. Not thread-safe.
class EchoServer {
 public:
  EchoServer(const Options& opt, const std::string& bind) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort(bind, grpc::InsecureServerCredentials(), &port_);
    builder.SetMaxReceiveMessageSize(-1);
    if (opt.server_api == Api::kSync) {
      builder.RegisterService(&sync_service_);
      builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::NUM_CQS,
                                  opt.server_threads);
    } else {
      builder.RegisterService(&async_service_);
      for (int t = 0; t < opt.server_threads; ++t) cqs_.push_back(builder.AddCompletionQueue());
      cq_locks_ = std::vector<std::mutex>(cqs_.size());
    }
    server_ = builder.BuildAndStart();
    if (!server_ || port_ == 0) throw RunError(fmt::format("cannot listen on {}", bind));
    for (std::size_t t = 0; t < cqs_.size(); ++t) {
      threads_.emplace_back([this, t] { poll_cq(t); });
    }
  }
  EchoServer(const EchoServer&) = delete;
  EchoServer& operator=(const EchoServer&) = delete;
  ~EchoServer() { stop(); }

  int port() const { return port_; }

  void stop() {
    if (!server_) return;
    // Taking each CQ's lock guarantees no thread re-arms a call after the
    // queue is shut down (which gRPC treats as a fatal error).
    for (auto& m : cq_locks_) {
      const std::lock_guard lock(m);
      stopping_ = true;
    }
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    for (auto& cq : cqs_) cq->Shutdown();
    for (auto& t : threads_) t.join();
    threads_.clear();
    server_.reset();
  }

 private:
  void poll_cq(std::size_t index) {
    grpc::ServerCompletionQueue& cq = *cqs_[index];
    {
      const std::lock_guard lock(cq_locks_[index]);
      for (int k = 0; k < kArmedCallsPerCq; ++k) new ServerCall(async_service_, cq);
    }
    void* tag = nullptr;
    bool ok = false;
    while (cq.Next(&tag, &ok)) {
      auto* call = static_cast<ServerCall*>(tag);
      if (!ok || call->answered) {  // finished, cancelled, or shutting down
        delete call;
        continue;
      }
      {
        const std::lock_guard lock(cq_locks_[index]);
        if (!stopping_) new ServerCall(async_service_, cq);
      }
      call->answered = true;
      call->responder.Finish(call->request, grpc::Status::OK, call);
    }
  }

  int port_ = 0;
  SyncEchoService sync_service_;
  EchoService::AsyncService async_service_;
  std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> cqs_;
  std::vector<std::mutex> cq_locks_;
  bool stopping_ = false;  // guarded by every cq_locks_ entry
  std::unique_ptr<grpc::Server> server_;
  std::vector<std::thread> threads_;
};

// ---------------------------------------------------------------------------
// Clients

// Each client thread gets its own channel and, through the local subchannel
// pool, its own TCP connection (gRPC would otherwise share one).
std::shared_ptr<grpc::Channel> make_channel(const std::string& target) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetMaxReceiveMessageSize(-1);
  auto channel =
      grpc::CreateCustomChannel("ipv4:" + target, grpc::InsecureChannelCredentials(), args);
  if (!channel->WaitForConnected(deadline_after(kConnectTimeout))) {
    throw RunError(fmt::format("cannot connect to {} within {} s; is the server running?", target,
                               kConnectTimeout.count()));
  }
  return channel;
}

[[noreturn]] void throw_status(const grpc::Status& status) {
  throw RunError(fmt::format("Echo RPC failed: code {}: {}", static_cast<int>(status.error_code()),
                             status.error_message()));
}

// Blocking calls, one at a time; returns the measured round trips.
measure::Histogram run_sync_client(const std::string& target, std::size_t size,
                                   const Options& opt) {
  auto stub = EchoService::NewStub(make_channel(target));
  EchoMessage request;
  request.set_payload(std::string(size, 'x'));
  measure::Histogram rtt;
  for (std::uint64_t k = 0; k < opt.warmup + opt.iters; ++k) {
    grpc::ClientContext ctx;
    ctx.set_deadline(deadline_after(kCallTimeout));
    EchoMessage response;
    const auto t0 = Clock::now();
    const grpc::Status status = stub->Echo(&ctx, request, &response);
    const auto t1 = Clock::now();
    if (!status.ok()) throw_status(status);
    if (response.payload().size() != size) throw RunError("echo returned a different size");
    if (k >= opt.warmup) rtt.record(static_cast<std::uint64_t>((t1 - t0).count()));
  }
  return rtt;
}

struct ClientCall {
  grpc::ClientContext ctx;
  EchoMessage response;
  grpc::Status status;
  std::unique_ptr<grpc::ClientAsyncResponseReader<EchoMessage>> reader;
};

// Keeps `window` calls in flight on one channel; returns the calls completed
// during the measured interval [warmup_s, warmup_s + duration_s).
std::uint64_t run_async_client(const std::string& target, std::size_t size, int window,
                               const Options& opt) {
  auto stub = EchoService::NewStub(make_channel(target));
  grpc::CompletionQueue cq;
  EchoMessage request;
  request.set_payload(std::string(size, 'x'));
  const auto start_call = [&] {
    auto* call = new ClientCall;
    call->ctx.set_deadline(deadline_after(kCallTimeout));
    call->reader = stub->PrepareAsyncEcho(&call->ctx, request, &cq);
    call->reader->StartCall();
    call->reader->Finish(&call->response, &call->status, call);
  };
  const auto measure_from = Clock::now() + std::chrono::duration<double>(opt.warmup_s);
  const auto measure_to = measure_from + std::chrono::duration<double>(opt.duration_s);
  for (int k = 0; k < window; ++k) start_call();
  int in_flight = window;
  std::uint64_t measured = 0;
  std::optional<grpc::Status> failure;
  void* tag = nullptr;
  bool ok = false;
  while (in_flight > 0 && cq.Next(&tag, &ok)) {
    std::unique_ptr<ClientCall> call(static_cast<ClientCall*>(tag));
    --in_flight;
    if (!ok || !call->status.ok()) {
      if (!failure) failure = ok ? call->status : grpc::Status(grpc::StatusCode::UNKNOWN, "!ok");
      continue;  // drain the rest before reporting
    }
    const auto now = Clock::now();
    if (now >= measure_from && now < measure_to) ++measured;
    if (now < measure_to && !failure) {
      start_call();
      ++in_flight;
    }
  }
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) delete static_cast<ClientCall*>(tag);
  if (failure) throw_status(*failure);
  return measured;
}

// Runs `body(thread_index)` on opt.client_threads threads (pinned to CPU 0
// when `pin`) and rethrows the first failure.
template <typename Body>
void run_client_threads(const Options& opt, bool pin, Body body) {
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(opt.client_threads));
  for (int t = 0; t < opt.client_threads; ++t) {
    threads.emplace_back([&, t] {
      try {
        if (pin && !baseline::pin_thread(pthread_self(), 0, "client thread")) {
          throw RunError("cannot pin client thread to CPU 0");
        }
        body(static_cast<std::size_t>(t));
      } catch (...) {
        errors[static_cast<std::size_t>(t)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

// ---------------------------------------------------------------------------
// Results

// The async client's result; prints its line. known_server_threads: the
// server's threads, when this process runs an async server (the sync
// server's thread pool is gRPC's to size, so no per-thread figures).
measure::Json rate_result(const Options& opt, std::size_t size, int window, std::uint64_t requests,
                          std::optional<int> known_server_threads) {
  const double rps = static_cast<double>(requests) / opt.duration_s;
  const double per_client = rps / opt.client_threads;
  fmt::print(
      "grpc_async size={} B window={} channels={} requests={} duration={:.1f} s "
      "rps={:.0f} rps/client_thread={:.0f}\n",
      size, window, opt.client_threads, requests, opt.duration_s, rps, per_client);
  std::fflush(stdout);
  measure::Json r = {{"size", size},
                     {"window", window},
                     {"sessions", opt.client_threads},
                     {"client_threads", opt.client_threads}};
  if (known_server_threads) r["server_threads"] = *known_server_threads;
  r["batch"] = 1;
  r["duration_s"] = measure::round_to(opt.duration_s);
  r["requests"] = requests;
  r["rps"] = measure::round_to(rps, 1);
  r["rps_per_client_thread"] = measure::round_to(per_client, 1);
  if (known_server_threads) {
    r["rps_per_server_thread"] = measure::round_to(rps / *known_server_threads, 1);
  }
  return r;
}

// ---------------------------------------------------------------------------
// Modes

std::string server_description(const Options& opt) {
  if (opt.server_api == Api::kSync) {
    return fmt::format("sync server (gRPC-managed thread pool, {} completion queue(s))",
                       opt.server_threads);
  }
  return fmt::format("async server ({} CompletionQueue thread(s), {} calls armed per CQ)",
                     opt.server_threads, kArmedCallsPerCq);
}

// Runs every point against target, adding the results to program's;
// known_server_threads as for rate_result.
void run_client(baseline::Program& program, const Options& opt, const std::string& target, bool pin,
                std::optional<int> known_server_threads) {
  auto& results = program.result().results;
  if (opt.api == Api::kSync)
    baseline::print_rtt_header(fmt::format("{:>8} {:>8}", "size", "iters"));
  for (const std::size_t size : opt.sizes) {
    if (opt.api == Api::kSync) {
      std::vector<measure::Histogram> per_thread(std::size_t(opt.client_threads));
      run_client_threads(
          opt, pin, [&](std::size_t t) { per_thread[t] = run_sync_client(target, size, opt); });
      measure::Histogram all;
      for (const auto& h : per_thread) all.merge(h);
      results.push_back(baseline::rtt_row(program, all,
                                          fmt::format("{:>8} {:>8}", size, all.count()),
                                          {{"size", size}, {"iters", all.count()}}));
      continue;
    }
    for (const int window : opt.windows) {
      std::atomic<std::uint64_t> requests{0};
      run_client_threads(
          opt, pin, [&](std::size_t) { requests += run_async_client(target, size, window, opt); });
      results.push_back(rate_result(opt, size, window, requests.load(), known_server_threads));
    }
  }
}

// Runs the client between the program's measurement marks, then prints the
// warnings and writes the result files.
void measure_client(baseline::Program& program, const Options& opt, const std::string& setup,
                    const std::string& target, bool pin, std::optional<int> known_server_threads,
                    int busy_cores) {
  const bool sync = opt.api == Api::kSync;
  program.result().system = sync ? "grpc_sync" : "grpc_async";
  program.describe("tcp", sync ? "latency" : "rate", setup,
                   {{"api", sync ? "sync" : "async"},
                    {"server_api", opt.server_api == Api::kSync ? "sync" : "async"},
                    {"sizes", opt.sizes},
                    {"iters", opt.iters},
                    {"warmup", opt.warmup},
                    {"outstanding", opt.windows},
                    {"duration_s", opt.duration_s},
                    {"warmup_s", opt.warmup_s},
                    {"client_threads", opt.client_threads},
                    {"server_threads", opt.server_threads}});
  program.start_measurement();
  run_client(program, opt, target, pin, known_server_threads);
  program.finish_measurement(busy_cores);
  program.check_trust();
  program.write_outputs();
}

std::string client_description(const Options& opt, const std::string& target) {
  const std::string calls =
      opt.api == Api::kSync
          ? fmt::format("blocking unary calls, 1 outstanding per thread, {} warmup calls",
                        opt.warmup)
          : fmt::format("CompletionQueue async client, {} s warmup per point", opt.warmup_s);
  return fmt::format(
      "grpc {} C++, insecure HTTP/2 over TCP to {}; client: {} thread(s), one channel "
      "(one TCP connection) each, {}; payload is a proto3 bytes field",
      grpc::Version(), target, opt.client_threads, calls);
}

int run_server_mode(const Options& opt, const std::string& bind) {
  // Block the stop signals before gRPC starts threads, so that they all
  // inherit the mask and sigwait below is the one place that sees them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  EchoServer server(opt, bind);
  fmt::print("grpc_echo server: {} listening on {} (port {}); SIGINT/SIGTERM to stop\n",
             server_description(opt), bind, server.port());
  std::fflush(stdout);
  int sig = 0;
  sigwait(&stop_signals, &sig);
  server.stop();
  return 0;
}

int run_client_mode(baseline::Program& program, const Options& opt, const std::string& target) {
  const std::string setup =
      client_description(opt, target) + "; separate server process (see its own output)";
  fmt::print("grpc_echo client: {}\n", setup);
  measure_client(program, opt, setup, target, /*pin=*/false, std::nullopt, 1);
  return 0;
}

int run_both_mode(baseline::Program& program, const Options& opt) {
  const bool pin = opt.pin && baseline::can_pin_cpus_0_and_1() &&
                   baseline::pin_thread(pthread_self(), 1, "server thread");
  EchoServer server(opt, "127.0.0.1:0");
  const std::string target = fmt::format("127.0.0.1:{}", server.port());
  const std::string placement =
      pin ? "one process; server and the gRPC threads created with it pinned to CPU 1, "
            "client threads pinned to CPU 0 (gRPC threads they spawn inherit CPU 0)"
          : "one process; no pinning, all threads float";
  const std::string setup = fmt::format("{}; {}; {}", client_description(opt, target),
                                        server_description(opt), placement);
  fmt::print("grpc_echo: {}\n", setup);
  std::fflush(stdout);
  const std::optional<int> known_server_threads =
      opt.server_api == Api::kAsync ? std::optional<int>(opt.server_threads) : std::nullopt;
  measure_client(program, opt, setup, target, pin, known_server_threads, 2);
  server.stop();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  baseline::Program program("grpc_echo", "grpc_sync",
                            "gRPC C++ unary echo over TCP: the peer a user would most likely "
                            "pick instead of librpc.",
                            argc, argv);
  Options opt;
  baseline::Modes modes(program, "127.0.0.1:50051",
                        {.client = [&](CLI::App& app) { add_client_options(app, opt); },
                         .server = [&](CLI::App& app) { add_server_options(app, opt); },
                         .both =
                             [&](CLI::App& app) {
                               app.add_flag_callback(
                                   "--no-pin", [&] { opt.pin = false; },
                                   "do not pin the server to CPU 1 and the client to CPU 0");
                             },
                         // gRPC resolves names and IPv6 itself.
                         .any_host = true},
                        "both");
  return program.run(argc, argv, [&] {
    if (modes.server()) return run_server_mode(opt, modes.bind);
    if (modes.client()) return run_client_mode(program, opt, modes.server_address);
    return run_both_mode(program, opt);
  });
}
