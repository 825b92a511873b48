// librpc latency benchmark, eRPC style: one outstanding request at a time,
// the response as large as the request (foreground echo handler, run in the
// server's event loop), round-trip percentiles per request size.
//
//   latency [--sizes 32,1024,...|--sweep] [--iters N] [--warmup N] ...
//       both mode (default): server Rpc in a thread pinned to CPU 1, client
//       pinned to CPU 0, one Nexus on 127.0.0.1 (or --server-uri), both
//       busy-polling
//   latency --mode server --server-uri HOST:PORT
//       serves echo requests at rpc_id 0 until SIGINT/SIGTERM
//   latency --mode client --server-uri HOST:PORT [--client-uri HOST:PORT] ...
//
// Measurement is that of bench/baselines/udp_pingpong: std::chrono::steady_clock
// is read right before enqueue_request and again inside the continuation; the
// client drives its event loop with run_event_loop_once until the continuation
// has run. Percentiles are nearest-rank over the measured round trips.

#include <arpa/inet.h>
#include <fmt/core.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <limits>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "rpc/rpc_all.h"

namespace {

constexpr rpc::ReqType kEchoType = 1;
constexpr rpc::RpcId kServerRpcId = 0;
constexpr rpc::RpcId kClientRpcId = 1;            // both mode: shares the server's Nexus
constexpr rpc::RpcId kStandaloneClientRpcId = 0;  // client mode: a Nexus of its own
constexpr std::size_t kDefaultSize = 32;
constexpr std::size_t kSweepMin = 32;
constexpr std::size_t kSweepMax = 64 << 10;
constexpr std::uint64_t kDefaultIters = 200000;
constexpr std::uint64_t kDefaultWarmup = 10000;
constexpr std::size_t kDefaultMtu = 1500;
// A request that has not completed after this long (librpc retransmits on
// its own every rto_us) means the server is gone.
constexpr auto kRequestTimeout = std::chrono::seconds(5);
constexpr auto kConnectTimeout = std::chrono::seconds(5);

using Clock = std::chrono::steady_clock;

// Bad command line: reported with the usage text, exit status 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Operational failure: exit status 1.
struct RunError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void PrintUsage(std::FILE* out) {
  fmt::print(out,
             "usage: latency [--mode both|server|client] [options]\n"
             "\n"
             "  --mode M             both (default): server + client in this process;\n"
             "                       server: serve echo at rpc_id 0 until SIGINT/SIGTERM;\n"
             "                       client: measure against rpc 0 at --server-uri\n"
             "  --server-uri H:P     server Nexus URI (required for server/client mode;\n"
             "                       both mode default 127.0.0.1:0)\n"
             "  --client-uri H:P     client Nexus URI (client mode; default: the local address\n"
             "                       that routes to the server, port 0)\n"
             "  --transport NAME     RpcConfig.transport (default udp)\n"
             "  --mtu BYTES          RpcConfig.mtu_bytes (default {}); must match the server's\n"
             "  --sizes A,B,...      request (= response) sizes in bytes (default {})\n"
             "  --sweep              sizes {} B .. {} KiB, powers of 2\n"
             "  --iters N            measured round trips per size (default {})\n"
             "  --warmup N           unmeasured round trips per size first (default {})\n"
             "  --duration SECONDS   cap on each size's warmup and on its measurement: stop\n"
             "                       after this long even if fewer round trips were done\n"
             "  --json FILE          also write the results as JSON to FILE\n"
             "  -h, --help           show this help\n",
             kDefaultMtu, kDefaultSize, kSweepMin, kSweepMax >> 10, kDefaultIters, kDefaultWarmup);
}

// ---------------------------------------------------------------------------
// Argument parsing

enum class Mode { kBoth, kServer, kClient };

struct Options {
  Mode mode = Mode::kBoth;
  std::optional<std::string> server_uri;
  std::optional<std::string> client_uri;
  std::string transport = "udp";
  std::size_t mtu = kDefaultMtu;
  std::vector<std::size_t> sizes{kDefaultSize};
  std::uint64_t iters = kDefaultIters;
  std::uint64_t warmup = kDefaultWarmup;
  std::optional<double> duration_s;
  std::optional<std::string> json;
  bool help = false;
};

std::uint64_t ParseUnsigned(std::string_view flag, std::string_view text, std::uint64_t min,
                            std::uint64_t max) {
  std::uint64_t value = 0;
  const char* first = text.data();
  const char* last = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(first, last, value);
  if (text.empty() || ec == std::errc::invalid_argument || ptr != last) {
    throw UsageError(fmt::format("{}: '{}' is not a non-negative integer", flag, text));
  }
  if (ec == std::errc::result_out_of_range || value < min || value > max) {
    throw UsageError(fmt::format("{}: {} is out of range [{}, {}]", flag, text, min, max));
  }
  return value;
}

double ParsePositiveDouble(std::string_view flag, std::string_view text) {
  double value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size() || !(value > 0) ||
      !std::isfinite(value)) {
    throw UsageError(fmt::format("{}: '{}' is not a positive number", flag, text));
  }
  return value;
}

// "host:port" with a non-empty host and a numeric port (0 allowed where a
// Nexus binds; resolution is left to librpc).
void CheckUri(std::string_view flag, std::string_view text, bool allow_port_zero) {
  const auto colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 == text.size()) {
    throw UsageError(fmt::format("{}: '{}' is not of the form HOST:PORT", flag, text));
  }
  ParseUnsigned(flag, text.substr(colon + 1), allow_port_zero ? 0 : 1, 65535);
}

std::vector<std::size_t> ParseSizes(std::string_view flag, std::string_view text) {
  std::vector<std::size_t> sizes;
  std::size_t pos = 0;
  for (;;) {
    const auto comma = text.find(',', pos);
    const auto item = text.substr(pos, comma == std::string_view::npos ? text.npos : comma - pos);
    sizes.push_back(static_cast<std::size_t>(
        ParseUnsigned(flag, item, 0, std::numeric_limits<std::uint32_t>::max())));
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  return sizes;
}

Options ParseArgs(int argc, char** argv) {
  Options opt;
  std::vector<std::string_view> args(argv + 1, argv + argc);
  bool sizes_given = false;
  bool sweep = false;
  bool load_flag_given = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string_view arg = args[i];
    if (arg == "-h" || arg == "--help") {
      opt.help = true;
      return opt;
    }
    if (arg == "--sweep") {
      sweep = true;
      load_flag_given = true;
      continue;
    }
    if (!arg.starts_with("--")) throw UsageError(fmt::format("unexpected argument '{}'", arg));
    // Accept both "--flag value" and "--flag=value".
    std::string_view flag = arg;
    std::optional<std::string_view> inline_value;
    if (const auto eq = arg.find('='); eq != std::string_view::npos) {
      flag = arg.substr(0, eq);
      inline_value = arg.substr(eq + 1);
    }
    static constexpr std::string_view kKnown[] = {
        "--mode",  "--server-uri", "--client-uri", "--transport", "--mtu",  "--sizes",
        "--iters", "--warmup",     "--duration",   "--json",      "--size",
    };
    if (std::find(std::begin(kKnown), std::end(kKnown), flag) == std::end(kKnown)) {
      throw UsageError(fmt::format("unknown option '{}'", flag));
    }
    std::string_view value;
    if (inline_value) {
      value = *inline_value;
    } else {
      if (i + 1 >= args.size()) throw UsageError(fmt::format("option '{}' requires a value", flag));
      value = args[++i];
    }
    if (flag == "--mode") {
      if (value == "both") {
        opt.mode = Mode::kBoth;
      } else if (value == "server") {
        opt.mode = Mode::kServer;
      } else if (value == "client") {
        opt.mode = Mode::kClient;
      } else {
        throw UsageError(fmt::format("--mode: '{}' is not one of both, server, client", value));
      }
    } else if (flag == "--server-uri") {
      opt.server_uri = std::string(value);
    } else if (flag == "--client-uri") {
      CheckUri(flag, value, /*allow_port_zero=*/true);
      opt.client_uri = std::string(value);
    } else if (flag == "--transport") {
      if (value.empty()) throw UsageError("--transport: empty name");
      opt.transport = std::string(value);
    } else if (flag == "--mtu") {
      opt.mtu = static_cast<std::size_t>(ParseUnsigned(flag, value, 1, 65535));
    } else if (flag == "--sizes" || flag == "--size") {
      opt.sizes = ParseSizes(flag, value);
      sizes_given = true;
      load_flag_given = true;
    } else if (flag == "--iters") {
      opt.iters = ParseUnsigned(flag, value, 1, std::numeric_limits<std::uint32_t>::max());
      load_flag_given = true;
    } else if (flag == "--warmup") {
      opt.warmup = ParseUnsigned(flag, value, 0, std::numeric_limits<std::uint32_t>::max());
      load_flag_given = true;
    } else if (flag == "--duration") {
      opt.duration_s = ParsePositiveDouble(flag, value);
      load_flag_given = true;
    } else if (flag == "--json") {
      if (value.empty()) throw UsageError("--json: empty file name");
      opt.json = std::string(value);
      load_flag_given = true;
    }
  }
  if (sweep && sizes_given) throw UsageError("--sizes and --sweep are mutually exclusive");
  if (sweep) {
    opt.sizes.clear();
    for (std::size_t s = kSweepMin; s <= kSweepMax; s *= 2) opt.sizes.push_back(s);
  }
  if (opt.mode == Mode::kServer && load_flag_given) {
    throw UsageError("--sizes/--sweep/--iters/--warmup/--duration/--json are client options");
  }
  if (opt.mode == Mode::kServer && opt.client_uri) {
    throw UsageError("--client-uri is not valid in server mode");
  }
  if (opt.mode == Mode::kBoth && opt.client_uri) {
    throw UsageError("--client-uri is not valid in both mode (one Nexus serves both Rpcs)");
  }
  if (opt.mode != Mode::kBoth && !opt.server_uri) {
    throw UsageError("server and client modes require --server-uri HOST:PORT");
  }
  if (opt.server_uri) {
    // A server may bind port 0 (it prints the real one); a client must name it.
    CheckUri("--server-uri", *opt.server_uri, /*allow_port_zero=*/opt.mode != Mode::kClient);
  }
  return opt;
}

// ---------------------------------------------------------------------------
// Helpers

std::string_view ModeName(Mode mode) {
  switch (mode) {
    case Mode::kServer:
      return "server";
    case Mode::kClient:
      return "client";
    case Mode::kBoth:
      break;
  }
  return "both";
}

bool PinThread(pthread_t thread, int cpu, std::string_view who) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (const int rc = pthread_setaffinity_np(thread, sizeof set, &set); rc != 0) {
    fmt::print(stderr, "latency: warning: cannot pin {} to CPU {}: {}\n", who, cpu,
               std::strerror(rc));
    return false;
  }
  return true;
}

bool CanPinToCpus01() {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return false;
  return CPU_COUNT(&allowed) >= 2 && CPU_ISSET(0, &allowed) && CPU_ISSET(1, &allowed);
}

// The local IPv4 address the kernel would use to reach server_uri's host
// (a connected UDP socket sends nothing). Used as the client Nexus host when
// --client-uri is not given: librpc needs a concrete address, not 0.0.0.0.
std::string LocalAddressTowards(const std::string& server_uri) {
  const auto colon = server_uri.rfind(':');
  const std::string host = server_uri.substr(0, colon);
  const std::string port = server_uri.substr(colon + 1);
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0) {
    throw RunError(fmt::format("cannot resolve '{}': {}", host, ::gai_strerror(rc)));
  }
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    ::freeaddrinfo(res);
    throw RunError(fmt::format("socket: {}", std::strerror(errno)));
  }
  const int rc = ::connect(fd, res->ai_addr, res->ai_addrlen);
  const int connect_errno = errno;
  ::freeaddrinfo(res);
  sockaddr_in local{};
  socklen_t len = sizeof local;
  if (rc != 0 || ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) != 0) {
    ::close(fd);
    throw RunError(fmt::format("no route to {}: {}; give --client-uri", server_uri,
                               std::strerror(rc != 0 ? connect_errno : errno)));
  }
  ::close(fd);
  char buf[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &local.sin_addr, buf, sizeof buf);
  return buf;
}

// Foreground echo: the response is a copy of the request, same size. Small
// responses go in the preallocated buffer; larger ones in a buffer the Rpc
// takes ownership of.
void EchoHandler(rpc::ReqHandle& h) {
  const rpc::MsgBuffer& req = h.request();
  rpc::MsgBuffer& pre = h.pre_resp_buffer();
  if (req.size() <= pre.max_size()) {
    std::memcpy(pre.data(), req.data(), req.size());
    pre.resize(req.size());
    h.rpc().enqueue_response(h, pre);
    return;
  }
  rpc::MsgBuffer resp = h.rpc().alloc_msg_buffer(req.size());
  if (!resp.valid()) {
    // Out of memory: answer with an empty response; the client reports it.
    pre.resize(0);
    h.rpc().enqueue_response(h, pre);
    return;
  }
  std::memcpy(resp.data(), req.data(), req.size());
  h.rpc().enqueue_response(h, resp);
}

// What the client's session callback saw of a failed connect.
struct ConnectWatch {
  bool failed = false;
  rpc::SmErr reason = rpc::SmErr::kNone;
};

rpc::RpcConfig MakeRpcConfig(const Options& opt, rpc::RpcId id, ConnectWatch* watch = nullptr) {
  rpc::RpcConfig config;
  config.rpc_id = id;
  config.transport = opt.transport;
  config.mtu_bytes = opt.mtu;
  if (watch != nullptr) {
    config.session_callback = [watch](rpc::SessionNum, rpc::SessionEvent event, rpc::SmErr err) {
      if (event == rpc::SessionEvent::kConnectFailed) {
        watch->failed = true;
        watch->reason = err;
      }
    };
  }
  return config;
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

void OnResponse(rpc::Rpc&, const rpc::Completion& c) {
  auto* p = static_cast<Pending*>(c.tag);
  p->t1 = Clock::now();
  p->done = true;
  p->errc = c.errc;
  p->resp_size = c.resp_size;
}

class LatencyClient {
 public:
  LatencyClient(rpc::Rpc& rpc, rpc::SessionNum sn) : rpc_(rpc), sn_(sn) {}

  SizeResult Run(std::size_t size, const Options& opt) {
    rpc::MsgBuffer req = rpc_.alloc_msg_buffer(size);
    rpc::MsgBuffer resp = rpc_.alloc_msg_buffer(size);
    if (!req.valid() || !resp.valid()) {
      if (req.valid()) rpc_.free_msg_buffer(req);
      if (resp.valid()) rpc_.free_msg_buffer(resp);
      throw RunError(fmt::format("cannot allocate {}-byte message buffers", size));
    }
    for (std::size_t k = 0; k < size; ++k) req.data()[k] = static_cast<std::uint8_t>('a' + k % 26);

    SizeResult res;
    res.size = size;
    res.rtt_ns.reserve(static_cast<std::size_t>(opt.iters));
    std::uint64_t retrans_before = 0;
    try {
      const auto cap = opt.duration_s ? std::chrono::duration_cast<Clock::duration>(
                                            std::chrono::duration<double>(*opt.duration_s))
                                      : Clock::duration::max();
      const auto warmup_start = Clock::now();
      for (std::uint64_t k = 0; k < opt.warmup; ++k) {
        RoundTrip(req, resp, size);
        if ((k & 0xff) == 0xff && Clock::now() - warmup_start > cap) break;
      }
      // Retransmissions are counted over the measured round trips only.
      retrans_before = rpc_.stats().retransmissions;
      const auto start = Clock::now();
      for (std::uint64_t k = 0; k < opt.iters; ++k) {
        res.rtt_ns.push_back(RoundTrip(req, resp, size));
        // Checking the cap every 256 round trips keeps the clock read off
        // the timed path's neighbourhood most of the time.
        if ((k & 0xff) == 0xff && Clock::now() - start > cap) {
          res.capped = k + 1 < opt.iters;
          break;
        }
      }
    } catch (...) {
      rpc_.free_msg_buffer(req);
      rpc_.free_msg_buffer(resp);
      throw;
    }
    res.retransmissions = rpc_.stats().retransmissions - retrans_before;
    rpc_.free_msg_buffer(req);
    rpc_.free_msg_buffer(resp);
    std::sort(res.rtt_ns.begin(), res.rtt_ns.end());
    return res;
  }

 private:
  // One request of `size` bytes; returns its round-trip time in ns.
  std::int64_t RoundTrip(rpc::MsgBuffer& req, rpc::MsgBuffer& resp, std::size_t size) {
    // Tag the payload with a sequence number so the echo is checked to be
    // this request's, not merely of the right size.
    const std::size_t tag = std::min(sizeof seq_, size);
    std::memcpy(req.data(), &seq_, tag);
    resp.resize(resp.max_size());
    Pending p;

    const auto t0 = Clock::now();
    const rpc::Errc rc = rpc_.enqueue_request(sn_, kEchoType, req, resp, OnResponse, &p);
    if (rc != rpc::Errc::kOk) {
      throw RunError(fmt::format("enqueue_request: {}", rpc::to_string(rc)));
    }
    for (std::uint32_t spins = 1; !p.done; ++spins) {
      rpc_.run_event_loop_once();
      if ((spins & 0xfff) == 0 && !p.done && Clock::now() - t0 > kRequestTimeout) {
        throw RunError(
            fmt::format("no response to a {}-byte request within {} s; is the server "
                        "running?",
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

// Nearest-rank percentile of a sorted, non-empty sample, in microseconds.
double PercentileUs(const std::vector<std::int64_t>& sorted, double p) {
  const auto n = sorted.size();
  auto rank = static_cast<std::size_t>(std::ceil(p / 100.0 * static_cast<double>(n)));
  rank = std::clamp<std::size_t>(rank, 1, n);
  return static_cast<double>(sorted[rank - 1]) / 1000.0;
}

struct Summary {
  std::size_t size = 0;
  std::size_t iters = 0;
  double p50 = 0, p90 = 0, p99 = 0, p999 = 0, max = 0, min = 0, mean = 0;
  std::uint64_t retransmissions = 0;
  bool capped = false;
};

Summary Summarize(const SizeResult& res) {
  const auto& s = res.rtt_ns;
  if (s.empty()) throw RunError("no round trips completed");
  Summary sum;
  sum.size = res.size;
  sum.iters = s.size();
  sum.p50 = PercentileUs(s, 50);
  sum.p90 = PercentileUs(s, 90);
  sum.p99 = PercentileUs(s, 99);
  sum.p999 = PercentileUs(s, 99.9);
  sum.max = static_cast<double>(s.back()) / 1000.0;
  sum.min = static_cast<double>(s.front()) / 1000.0;
  sum.mean = static_cast<double>(std::accumulate(s.begin(), s.end(), std::int64_t{0})) /
             static_cast<double>(s.size()) / 1000.0;
  sum.retransmissions = res.retransmissions;
  sum.capped = res.capped;
  return sum;
}

void PrintSummary(const Summary& s) {
  fmt::print(
      "librpc size={} B iters={} p50={:.2f} us p90={:.2f} us p99={:.2f} us p99.9={:.2f} us "
      "max={:.2f} us{}{}\n",
      s.size, s.iters, s.p50, s.p90, s.p99, s.p999, s.max,
      s.retransmissions ? fmt::format(" retransmissions={}", s.retransmissions) : std::string(),
      s.capped ? " (capped by --duration)" : "");
  std::fflush(stdout);
}

// JSON string body: escapes quotes, backslashes and control characters.
std::string JsonEscape(std::string_view in) {
  std::string out;
  for (const char c : in) {
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

void WriteJson(const std::string& path, const Options& opt, std::string_view setup,
               const std::vector<Summary>& results) {
  std::string out = fmt::format(
      "{{\"system\":\"librpc\",\"transport\":\"{}\",\"mode\":\"{}\",\"setup\":\"{}\","
      "\"mtu_bytes\":{},\"warmup\":{},\"results\":[",
      JsonEscape(opt.transport), ModeName(opt.mode), JsonEscape(setup), opt.mtu, opt.warmup);
  for (std::size_t k = 0; k < results.size(); ++k) {
    const Summary& s = results[k];
    out += fmt::format(
        "{}{{\"size\":{},\"iters\":{},\"p50_us\":{:.3f},\"p90_us\":{:.3f},\"p99_us\":{:.3f},"
        "\"p999_us\":{:.3f},\"max_us\":{:.3f},\"min_us\":{:.3f},\"mean_us\":{:.3f},"
        "\"retransmissions\":{}}}",
        k ? "," : "", s.size, s.iters, s.p50, s.p90, s.p99, s.p999, s.max, s.min, s.mean,
        s.retransmissions);
  }
  out += "]}\n";
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) throw RunError(fmt::format("cannot open {}: {}", path, std::strerror(errno)));
  const bool write_failed = std::fwrite(out.data(), 1, out.size(), f) != out.size();
  if (std::fclose(f) != 0 || write_failed) {
    throw RunError(fmt::format("writing {}: {}", path, std::strerror(errno)));
  }
}

// Connects a session to rpc 0 at server_uri and runs every size.
std::vector<Summary> RunClient(rpc::Rpc& client, const ConnectWatch& watch,
                               const std::string& server_uri, const Options& opt) {
  for (std::size_t size : opt.sizes) {
    if (size > client.max_msg_size()) {
      throw RunError(fmt::format("size {} exceeds the largest message of this Rpc ({} B)", size,
                                 client.max_msg_size()));
    }
  }
  auto sn = client.create_session(server_uri, kServerRpcId);
  if (!sn) throw RunError(fmt::format("create_session {}: {}", server_uri, sn.error()));
  const auto deadline = Clock::now() + kConnectTimeout;
  while (!client.is_connected(*sn)) {
    if (watch.failed) {
      throw RunError(fmt::format("cannot connect to rpc {} at {}: {}", kServerRpcId, server_uri,
                                 rpc::to_string(watch.reason)));
    }
    if (Clock::now() > deadline) {
      throw RunError(fmt::format("cannot connect to rpc {} at {} within {} s", kServerRpcId,
                                 server_uri, kConnectTimeout.count()));
    }
    client.run_event_loop_once();
  }

  LatencyClient lc(client, *sn);
  std::vector<Summary> results;
  for (std::size_t size : opt.sizes) {
    results.push_back(Summarize(lc.Run(size, opt)));
    PrintSummary(results.back());
  }
  (void)client.destroy_session(*sn);
  // Let the disconnect reach the server before the Rpc goes away.
  client.run_event_loop(std::chrono::milliseconds(10));
  return results;
}

void PrintPlan(const Options& opt) {
  std::string sizes;
  for (std::size_t s : opt.sizes) sizes += fmt::format("{}{}", sizes.empty() ? "" : ",", s);
  fmt::print(
      "latency: transport {}, mtu {}, 1 outstanding request, echo of the same size, "
      "sizes {} B, {} warmup + {} measured round trips per size{}\n",
      opt.transport, opt.mtu, sizes, opt.warmup, opt.iters,
      opt.duration_s ? fmt::format(" (at most {} s each)", *opt.duration_s) : "");
}

// ---------------------------------------------------------------------------
// Modes

std::atomic<bool> g_stop{false};
extern "C" void OnSignal(int) { g_stop.store(true, std::memory_order_relaxed); }

int RunServerMode(const Options& opt) {
  rpc::Nexus nexus(rpc::NexusConfig{.uri = *opt.server_uri, .num_bg_threads = 0});
  if (auto r = nexus.register_handler(kEchoType, EchoHandler); !r) throw RunError(r.error());
  rpc::Rpc server(nexus, MakeRpcConfig(opt, kServerRpcId));
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  fmt::print(
      "latency server: rpc {} on {} (transport {}, mtu {}), busy-polling, echo handler in the "
      "event loop; Ctrl-C to stop\n",
      kServerRpcId, nexus.uri(), server.transport_name(), opt.mtu);
  std::fflush(stdout);
  while (!g_stop.load(std::memory_order_relaxed)) server.run_event_loop_once();
  fmt::print("latency server: stopping after {} requests\n", server.stats().handlers_run);
  return 0;
}

int RunClientMode(const Options& opt) {
  const std::string client_uri =
      opt.client_uri ? *opt.client_uri : LocalAddressTowards(*opt.server_uri) + ":0";
  rpc::Nexus nexus(rpc::NexusConfig{.uri = client_uri, .num_bg_threads = 0});
  ConnectWatch watch;
  rpc::Rpc client(nexus, MakeRpcConfig(opt, kStandaloneClientRpcId, &watch));
  const std::string setup =
      fmt::format("client on {} against rpc {} at {}, busy-polling, not pinned", nexus.uri(),
                  kServerRpcId, *opt.server_uri);
  fmt::print("latency: client mode: {}\n", setup);
  PrintPlan(opt);
  std::fflush(stdout);
  const auto results = RunClient(client, watch, *opt.server_uri, opt);
  if (opt.json) WriteJson(*opt.json, opt, setup, results);
  return 0;
}

int RunBothMode(const Options& opt) {
  const bool can_pin = CanPinToCpus01();
  // The Nexus (and its session-management thread) is created before any
  // pinning, so that thread keeps the process's original affinity.
  rpc::Nexus nexus(
      rpc::NexusConfig{.uri = opt.server_uri.value_or("127.0.0.1:0"), .num_bg_threads = 0});
  if (auto r = nexus.register_handler(kEchoType, EchoHandler); !r) throw RunError(r.error());

  std::atomic<bool> stop{false};
  std::atomic<int> server_state{0};  // 0 starting, 1 ready, 2 failed
  std::atomic<bool> server_pinned{false};
  std::exception_ptr server_error;
  std::thread server([&] {
    try {
      if (can_pin) server_pinned.store(PinThread(pthread_self(), 1, "server thread"));
      rpc::Rpc rpc(nexus, MakeRpcConfig(opt, kServerRpcId));
      server_state.store(1);
      while (!stop.load(std::memory_order_relaxed)) rpc.run_event_loop_once();
    } catch (...) {
      server_error = std::current_exception();
      server_state.store(2);
    }
  });
  while (server_state.load() == 0) std::this_thread::yield();
  if (server_state.load() == 2) {
    server.join();
    std::rethrow_exception(server_error);
  }

  const bool pinned = server_pinned.load() && PinThread(pthread_self(), 0, "client thread");
  const std::string setup =
      pinned ? fmt::format(
                   "both mode on {}: server Rpc thread pinned to CPU 1, client pinned to "
                   "CPU 0, both busy-polling",
                   nexus.uri())
             : fmt::format(
                   "both mode on {}: NOT pinned ({}); server and client threads float, "
                   "both busy-polling",
                   nexus.uri(),
                   can_pin ? "pthread_setaffinity_np failed" : "CPUs 0 and 1 not both available");
  fmt::print("latency: {}\n", setup);
  PrintPlan(opt);
  std::fflush(stdout);

  std::vector<Summary> results;
  std::exception_ptr client_error;
  try {
    ConnectWatch watch;
    rpc::Rpc client(nexus, MakeRpcConfig(opt, kClientRpcId, &watch));
    results = RunClient(client, watch, nexus.uri(), opt);
  } catch (...) {
    client_error = std::current_exception();
  }
  stop.store(true, std::memory_order_relaxed);
  server.join();
  if (client_error) std::rethrow_exception(client_error);
  if (server_error) std::rethrow_exception(server_error);
  if (opt.json) WriteJson(*opt.json, opt, setup, results);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  try {
    opt = ParseArgs(argc, argv);
  } catch (const UsageError& e) {
    fmt::print(stderr, "latency: error: {}\n", e.what());
    PrintUsage(stderr);
    return 2;
  }
  if (opt.help) {
    PrintUsage(stdout);
    return 0;
  }
  try {
    switch (opt.mode) {
      case Mode::kServer:
        return RunServerMode(opt);
      case Mode::kClient:
        return RunClientMode(opt);
      case Mode::kBoth:
        return RunBothMode(opt);
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "latency: error: {}\n", e.what());
    return 1;
  }
  return 1;
}
