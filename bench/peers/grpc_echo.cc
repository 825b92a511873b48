// gRPC C++ unary echo: the peer a user would most likely pick instead of
// librpc, measured over TCP loopback and reported as bench/compare/SCHEMA.md
// JSON (system "grpc_sync" for latency, "grpc_async" for rate).
//
//   grpc_echo [both] [options]                 server and client in one process, 127.0.0.1
//   grpc_echo server [--bind IP:PORT] [--server-api sync|async] [--server-threads N]
//   grpc_echo client --server IP:PORT [options]
//
// Client, `--api sync` (default): blocking unary calls, one outstanding per
// client thread, each timed with std::chrono::steady_clock; nearest-rank
// round-trip percentiles per --size. `--api async`: a CompletionQueue client
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

#include <grpcpp/grpcpp.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <fmt/core.h>

#include "echo.grpc.pb.h"

namespace {

using librpc::bench::EchoMessage;
using librpc::bench::EchoService;
using Clock = std::chrono::steady_clock;

constexpr std::size_t kMaxSize = 64u << 20;  // gRPC's receive limit is lifted to match
constexpr std::string_view kDefaultBind = "127.0.0.1:50051";
constexpr int kArmedCallsPerCq = 256;  // > the largest window we try, so none waits
constexpr auto kCallTimeout = std::chrono::seconds(5);
constexpr auto kConnectTimeout = std::chrono::seconds(5);
constexpr std::size_t kMaxSamples = 1000;  // SCHEMA: samples_us holds at most 1000

// gRPC deadlines take system_clock time points only.
std::chrono::system_clock::time_point deadline_after(std::chrono::seconds timeout) {
  return std::chrono::system_clock::now() + timeout;
}

// Bad command line: reported with the usage text, exit status 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Operational failure (server unreachable, call failed): exit status 1.
struct RunError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class Mode { kBoth, kServer, kClient };
enum class Api { kSync, kAsync };

struct Options {
  Mode mode = Mode::kBoth;
  Api api = Api::kSync;
  Api server_api = Api::kAsync;
  std::string bind{kDefaultBind};
  std::string server;
  std::vector<std::size_t> sizes{32};
  std::uint64_t iters = 50000;
  std::uint64_t warmup = 5000;
  std::vector<int> windows{8};
  double duration_s = 5.0;
  double warmup_s = 1.0;
  int client_threads = 1;
  int server_threads = 1;
  bool pin = true;
  std::optional<std::string> json;
  bool help = false;
};

void print_usage(std::FILE* out) {
  fmt::print(out,
             "usage:\n"
             "  grpc_echo [both] [client options] [server options]   (one process, 127.0.0.1)\n"
             "  grpc_echo server [--bind IP:PORT] [server options]   (runs until SIGINT/SIGTERM)\n"
             "  grpc_echo client --server IP:PORT [client options]\n"
             "\n"
             "client options:\n"
             "  --api sync|async      sync: blocking calls, latency percentiles (default)\n"
             "                        async: CompletionQueue client, request rate\n"
             "  --size B[,B...]       request = response payload bytes (default 32)\n"
             "  --iters N             sync: measured calls per size and thread (default 50000)\n"
             "  --warmup N            sync: unmeasured calls first (default 5000)\n"
             "  --outstanding W[,W..] async: calls in flight per channel (default 8)\n"
             "  --duration S          async: measured seconds per point (default 5)\n"
             "  --warmup-s S          async: unmeasured seconds per point first (default 1)\n"
             "  --client-threads N    client threads, one channel each (default 1)\n"
             "  --json FILE           write SCHEMA.md JSON to FILE\n"
             "server options:\n"
             "  --server-api sync|async  handler on gRPC's sync pool or on our CQ threads\n"
             "                           (default async)\n"
             "  --server-threads N       async: CQ threads; sync: completion queues (default 1)\n"
             "  --no-pin                 both mode: do not pin server to CPU 1, client to CPU 0\n"
             "default --bind is {} (server mode); both mode uses 127.0.0.1:0\n",
             kDefaultBind);
}

// ---------------------------------------------------------------------------
// Argument parsing

std::uint64_t parse_unsigned(std::string_view flag, std::string_view text, std::uint64_t min,
                             std::uint64_t max) {
  std::uint64_t value = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec == std::errc::invalid_argument || ptr != text.data() + text.size()) {
    throw UsageError(fmt::format("{}: '{}' is not a non-negative integer", flag, text));
  }
  if (ec == std::errc::result_out_of_range || value < min || value > max) {
    throw UsageError(fmt::format("{}: {} is out of range [{}, {}]", flag, text, min, max));
  }
  return value;
}

double parse_seconds(std::string_view flag, std::string_view text) {
  try {
    std::size_t used = 0;
    const double value = std::stod(std::string(text), &used);
    if (used == text.size() && value > 0 && value <= 3600) return value;
  } catch (const std::exception&) {
  }
  throw UsageError(fmt::format("{}: '{}' is not a number of seconds in (0, 3600]", flag, text));
}

std::vector<std::uint64_t> parse_list(std::string_view flag, std::string_view text,
                                      std::uint64_t min, std::uint64_t max) {
  std::vector<std::uint64_t> values;
  for (std::size_t start = 0;;) {
    const auto comma = text.find(',', start);
    values.push_back(parse_unsigned(flag, text.substr(start, comma - start), min, max));
    if (comma == std::string_view::npos) return values;
    start = comma + 1;
  }
}

Api parse_api(std::string_view flag, std::string_view text) {
  if (text == "sync") return Api::kSync;
  if (text == "async") return Api::kAsync;
  throw UsageError(fmt::format("{}: '{}' is neither 'sync' nor 'async'", flag, text));
}

void check_endpoint(std::string_view flag, std::string_view text) {
  const auto colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0) {
    throw UsageError(fmt::format("{}: '{}' is not of the form IP:PORT", flag, text));
  }
  parse_unsigned(flag, text.substr(colon + 1), 0, 65535);
}

// Applies one "--flag value" pair to `opt`; the caller has checked the mode.
void apply_option(Options& opt, std::string_view flag, std::string_view value) {
  if (flag == "--api") {
    opt.api = parse_api(flag, value);
  } else if (flag == "--server-api") {
    opt.server_api = parse_api(flag, value);
  } else if (flag == "--bind" || flag == "--server") {
    check_endpoint(flag, value);
    (flag == "--bind" ? opt.bind : opt.server) = std::string(value);
  } else if (flag == "--size") {
    opt.sizes.clear();
    for (auto v : parse_list(flag, value, 0, kMaxSize)) opt.sizes.push_back(v);
  } else if (flag == "--iters") {
    opt.iters = parse_unsigned(flag, value, 1, 1u << 30);
  } else if (flag == "--warmup") {
    opt.warmup = parse_unsigned(flag, value, 0, 1u << 30);
  } else if (flag == "--outstanding") {
    opt.windows.clear();
    for (auto v : parse_list(flag, value, 1, kArmedCallsPerCq)) opt.windows.push_back(int(v));
  } else if (flag == "--duration") {
    opt.duration_s = parse_seconds(flag, value);
  } else if (flag == "--warmup-s") {
    opt.warmup_s = parse_seconds(flag, value);
  } else if (flag == "--client-threads") {
    opt.client_threads = static_cast<int>(parse_unsigned(flag, value, 1, 256));
  } else if (flag == "--server-threads") {
    opt.server_threads = static_cast<int>(parse_unsigned(flag, value, 1, 256));
  } else if (flag == "--json") {
    if (value.empty()) throw UsageError("--json: empty file name");
    opt.json = std::string(value);
  } else {
    throw UsageError(fmt::format("unknown option '{}'", flag));
  }
}

constexpr std::string_view kFlags[] = {
    "--api",   "--server-api",     "--bind",          "--server",   "--size",
    "--iters", "--warmup",         "--duration",      "--warmup-s", "--outstanding",
    "--json",  "--client-threads", "--server-threads"};

bool option_valid_in(std::string_view flag, Mode mode) {
  const bool server_only = flag == "--bind";
  const bool client_only = flag == "--server";
  const bool server_side = flag == "--server-api" || flag == "--server-threads";
  if (server_only) return mode == Mode::kServer;
  if (client_only) return mode == Mode::kClient;
  if (server_side) return mode != Mode::kClient;
  return mode != Mode::kServer;  // every other option drives the client
}

Options parse_args(int argc, char** argv) {
  Options opt;
  const std::vector<std::string_view> args(argv + 1, argv + argc);
  std::size_t i = 0;
  if (!args.empty() && !args[0].starts_with("-")) {
    if (args[0] == "server") {
      opt.mode = Mode::kServer;
    } else if (args[0] == "client") {
      opt.mode = Mode::kClient;
    } else if (args[0] != "both") {
      throw UsageError(fmt::format("unknown mode '{}' (expected server, client or both)", args[0]));
    }
    ++i;
  }
  for (; i < args.size(); ++i) {
    const std::string_view arg = args[i];
    if (arg == "-h" || arg == "--help") {
      opt.help = true;
      return opt;
    }
    if (arg == "--no-pin") {
      if (opt.mode != Mode::kBoth) throw UsageError("--no-pin is only valid in both mode");
      opt.pin = false;
      continue;
    }
    if (!arg.starts_with("--")) throw UsageError(fmt::format("unexpected argument '{}'", arg));
    std::string_view flag = arg;
    std::optional<std::string_view> value;
    if (const auto eq = arg.find('='); eq != std::string_view::npos) {
      flag = arg.substr(0, eq);
      value = arg.substr(eq + 1);
    } else if (i + 1 < args.size()) {
      value = args[++i];
    }
    if (std::find(std::begin(kFlags), std::end(kFlags), flag) == std::end(kFlags)) {
      throw UsageError(fmt::format("unknown option '{}'", flag));
    }
    if (!value) throw UsageError(fmt::format("option '{}' requires a value", flag));
    if (!option_valid_in(flag, opt.mode)) {
      throw UsageError(fmt::format("option '{}' is not valid in this mode", flag));
    }
    apply_option(opt, flag, *value);
  }
  if (opt.mode == Mode::kClient && opt.server.empty()) {
    throw UsageError("client mode requires --server IP:PORT");
  }
  return opt;
}

// ---------------------------------------------------------------------------
// Pinning

bool pin_current_thread(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
}

bool cpus_0_and_1_available() {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return false;
  return CPU_ISSET(0, &allowed) && CPU_ISSET(1, &allowed);
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

// Blocking calls, one at a time; returns the measured round trips in ns.
std::vector<std::int64_t> run_sync_client(const std::string& target, std::size_t size,
                                          const Options& opt) {
  auto stub = EchoService::NewStub(make_channel(target));
  EchoMessage request;
  request.set_payload(std::string(size, 'x'));
  std::vector<std::int64_t> rtt_ns;
  rtt_ns.reserve(static_cast<std::size_t>(opt.iters));
  for (std::uint64_t k = 0; k < opt.warmup + opt.iters; ++k) {
    grpc::ClientContext ctx;
    ctx.set_deadline(deadline_after(kCallTimeout));
    EchoMessage response;
    const auto t0 = Clock::now();
    const grpc::Status status = stub->Echo(&ctx, request, &response);
    const auto t1 = Clock::now();
    if (!status.ok()) throw_status(status);
    if (response.payload().size() != size) throw RunError("echo returned a different size");
    if (k >= opt.warmup) rtt_ns.push_back((t1 - t0) / std::chrono::nanoseconds(1));
  }
  return rtt_ns;
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
        if (pin && !pin_current_thread(0)) throw RunError("cannot pin client thread to CPU 0");
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

std::string json_escape(std::string_view text) {
  std::string out;
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
    } else {
      out += c;
    }
  }
  return out;
}

// Nearest-rank percentile of a sorted, non-empty sample, in microseconds.
double percentile_us(const std::vector<std::int64_t>& sorted, double p) {
  const auto n = sorted.size();
  auto rank = static_cast<std::size_t>(std::ceil(p / 100.0 * static_cast<double>(n)));
  rank = std::clamp<std::size_t>(rank, 1, n);
  return static_cast<double>(sorted[rank - 1]) / 1000.0;
}

std::string latency_result(std::size_t size, const std::vector<std::int64_t>& sorted) {
  const double p50 = percentile_us(sorted, 50), p90 = percentile_us(sorted, 90);
  const double p99 = percentile_us(sorted, 99), p999 = percentile_us(sorted, 99.9);
  const double max = static_cast<double>(sorted.back()) / 1000.0;
  fmt::print(
      "grpc_sync size={} B iters={} p50={:.2f} us p90={:.2f} us p99={:.2f} us "
      "p99.9={:.2f} us max={:.2f} us\n",
      size, sorted.size(), p50, p90, p99, p999, max);
  std::fflush(stdout);
  // Down-sample evenly across the sorted list, keeping min and max.
  const std::size_t n = sorted.size(), k = std::min(n, kMaxSamples);
  std::string samples;
  for (std::size_t i = 0; i < k; ++i) {
    const std::size_t idx = k == 1 ? 0 : i * (n - 1) / (k - 1);
    samples += fmt::format("{}{:.3f}", i ? "," : "", static_cast<double>(sorted[idx]) / 1000.0);
  }
  return fmt::format(
      "{{\"size\":{},\"iters\":{},\"p50_us\":{:.3f},\"p90_us\":{:.3f},\"p99_us\":{:.3f},"
      "\"p999_us\":{:.3f},\"max_us\":{:.3f},\"samples_us\":[{}]}}",
      size, n, p50, p90, p99, p999, max, samples);
}

std::string rate_result(const Options& opt, std::size_t size, int window, std::uint64_t requests) {
  const double rps = static_cast<double>(requests) / opt.duration_s;
  const double per_client = rps / opt.client_threads;
  fmt::print(
      "grpc_async size={} B window={} channels={} requests={} duration={:.1f} s "
      "rps={:.0f} rps/client_thread={:.0f}\n",
      size, window, opt.client_threads, requests, opt.duration_s, rps, per_client);
  std::fflush(stdout);
  // The sync server's thread pool is gRPC's to size, so no per-thread figures.
  const bool known_server = opt.mode == Mode::kBoth && opt.server_api == Api::kAsync;
  const std::string server_threads =
      known_server ? fmt::format("\"server_threads\":{},", opt.server_threads) : "";
  const std::string per_server =
      known_server ? fmt::format(",\"rps_per_server_thread\":{:.1f}", rps / opt.server_threads)
                   : "";
  return fmt::format(
      "{{\"size\":{},\"window\":{},\"sessions\":{},\"client_threads\":{},{}\"batch\":1,"
      "\"duration_s\":{:.3f},\"requests\":{},\"rps\":{:.1f},\"rps_per_client_thread\":{:.1f}{}}}",
      size, window, opt.client_threads, opt.client_threads, server_threads, opt.duration_s,
      requests, rps, per_client, per_server);
}

void write_json(const std::string& path, const Options& opt, std::string_view setup,
                const std::vector<std::string>& results) {
  std::string joined;
  for (const auto& r : results) joined += (joined.empty() ? "" : ",") + r;
  const bool sync = opt.api == Api::kSync;
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) throw RunError(fmt::format("cannot open {}: {}", path, std::strerror(errno)));
  fmt::print(f,
             "{{\"system\":\"{}\",\"transport\":\"tcp\",\"workload\":\"{}\",\"setup\":\"{}\","
             "\"results\":[{}]}}\n",
             sync ? "grpc_sync" : "grpc_async", sync ? "latency" : "rate", json_escape(setup),
             joined);
  const bool failed = std::ferror(f) != 0;
  if (std::fclose(f) != 0 || failed) throw RunError(fmt::format("writing {} failed", path));
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

std::vector<std::string> run_client(const Options& opt, const std::string& target, bool pin) {
  std::vector<std::string> results;
  for (const std::size_t size : opt.sizes) {
    if (opt.api == Api::kSync) {
      std::vector<std::vector<std::int64_t>> per_thread(std::size_t(opt.client_threads));
      run_client_threads(
          opt, pin, [&](std::size_t t) { per_thread[t] = run_sync_client(target, size, opt); });
      std::vector<std::int64_t> all;
      for (auto& v : per_thread) all.insert(all.end(), v.begin(), v.end());
      std::sort(all.begin(), all.end());
      results.push_back(latency_result(size, all));
      continue;
    }
    for (const int window : opt.windows) {
      std::atomic<std::uint64_t> requests{0};
      run_client_threads(
          opt, pin, [&](std::size_t) { requests += run_async_client(target, size, window, opt); });
      results.push_back(rate_result(opt, size, window, requests.load()));
    }
  }
  return results;
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

int run_server_mode(const Options& opt) {
  // Block the stop signals before gRPC starts threads, so that they all
  // inherit the mask and sigwait below is the one place that sees them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  EchoServer server(opt, opt.bind);
  fmt::print("grpc_echo server: {} listening on {} (port {}); SIGINT/SIGTERM to stop\n",
             server_description(opt), opt.bind, server.port());
  std::fflush(stdout);
  int sig = 0;
  sigwait(&stop_signals, &sig);
  server.stop();
  return 0;
}

int run_client_mode(const Options& opt) {
  const std::string setup =
      client_description(opt, opt.server) + "; separate server process (see its own output)";
  fmt::print("grpc_echo client: {}\n", setup);
  const auto results = run_client(opt, opt.server, /*pin=*/false);
  if (opt.json) write_json(*opt.json, opt, setup, results);
  return 0;
}

int run_both_mode(const Options& opt) {
  const bool pin = opt.pin && cpus_0_and_1_available() && pin_current_thread(1);
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
  const auto results = run_client(opt, target, pin);
  server.stop();
  if (opt.json) write_json(*opt.json, opt, setup, results);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  try {
    opt = parse_args(argc, argv);
  } catch (const UsageError& e) {
    fmt::print(stderr, "grpc_echo: error: {}\n", e.what());
    print_usage(stderr);
    return 2;
  }
  if (opt.help) {
    print_usage(stdout);
    return 0;
  }
  try {
    switch (opt.mode) {
      case Mode::kServer:
        return run_server_mode(opt);
      case Mode::kClient:
        return run_client_mode(opt);
      case Mode::kBoth:
        return run_both_mode(opt);
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "grpc_echo: error: {}\n", e.what());
    return 1;
  }
  return 1;
}
