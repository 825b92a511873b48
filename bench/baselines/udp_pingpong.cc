// Raw UDP busy-poll ping-pong: the "limit of the path" baseline that librpc's
// latency is compared to. Self-contained: libc + C++ std + fmt only.
//
//   udp_pingpong server [--bind IP:PORT]
//   udp_pingpong client --server IP:PORT [--size B] [--iters N] [--warmup N] [--json FILE]
//   udp_pingpong [--size B] [--iters N] [--warmup N] [--json FILE]   (both, over 127.0.0.1)
//
// Both sides use nonblocking sockets and busy-poll (MSG_DONTWAIT). The echo
// server receives batches of up to 32 datagrams with recvmmsg and echoes them
// back to their senders with sendmmsg. The client sends one datagram with
// sendto and spins on recvfrom until the echo arrives, timing each round trip
// with std::chrono::steady_clock. A 0-length datagram tells the server to stop
// (honoured only in combined mode; a standalone server runs until killed).

#include <arpa/inet.h>
#include <fmt/core.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
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

namespace {

constexpr std::size_t kMaxUdpPayload = 65507;  // IPv4 UDP maximum
constexpr std::size_t kBatch = 32;
constexpr std::size_t kDefaultSize = 32;
constexpr std::uint64_t kDefaultIters = 200000;
constexpr std::uint64_t kDefaultWarmup = 10000;
constexpr std::string_view kDefaultBind = "0.0.0.0:7777";
constexpr auto kReplyTimeout = std::chrono::seconds(1);
constexpr int kMaxConsecutiveLost = 3;

using Clock = std::chrono::steady_clock;

// Bad command line: reported with the usage text, exit status 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Operational failure (socket error, unresponsive server): exit status 1.
struct RunError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

[[noreturn]] void ThrowErrno(std::string_view what) {
  throw RunError(fmt::format("{}: {}", what, std::strerror(errno)));
}

void PrintUsage(std::FILE* out) {
  fmt::print(out,
             "usage:\n"
             "  udp_pingpong [--size BYTES] [--iters N] [--warmup N] [--json FILE]\n"
             "      combined mode: echo server thread (CPU 1) + client (CPU 0) over 127.0.0.1\n"
             "  udp_pingpong server [--bind IP:PORT]\n"
             "      echo server, default bind {}; runs until killed\n"
             "  udp_pingpong client --server IP:PORT [--size BYTES] [--iters N] [--warmup N]\n"
             "                      [--json FILE]\n"
             "\n"
             "  --size BYTES   datagram payload size, 1..{} (default {})\n"
             "  --iters N      measured round trips, >= 1 (default {})\n"
             "  --warmup N     unmeasured round trips before measuring (default {})\n"
             "  --json FILE    also write the results as JSON to FILE\n"
             "  -h, --help     show this help\n",
             kDefaultBind, kMaxUdpPayload, kDefaultSize, kDefaultIters, kDefaultWarmup);
}

// ---------------------------------------------------------------------------
// Argument parsing

enum class Mode { kCombined, kServer, kClient };

struct Options {
  Mode mode = Mode::kCombined;
  std::string bind{kDefaultBind};
  std::optional<std::string> server;
  std::size_t size = kDefaultSize;
  std::uint64_t iters = kDefaultIters;
  std::uint64_t warmup = kDefaultWarmup;
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

sockaddr_in ParseEndpoint(std::string_view flag, std::string_view text) {
  const auto colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 == text.size()) {
    throw UsageError(fmt::format("{}: '{}' is not of the form IPV4:PORT", flag, text));
  }
  const std::string host(text.substr(0, colon));
  const auto port = ParseUnsigned(flag, text.substr(colon + 1), 0, 65535);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    throw UsageError(fmt::format("{}: '{}' is not an IPv4 address", flag, host));
  }
  return addr;
}

Options ParseArgs(int argc, char** argv) {
  Options opt;
  std::vector<std::string_view> args(argv + 1, argv + argc);
  std::size_t i = 0;
  if (!args.empty() && !args[0].starts_with("-")) {
    if (args[0] == "server") {
      opt.mode = Mode::kServer;
    } else if (args[0] == "client") {
      opt.mode = Mode::kClient;
    } else {
      throw UsageError(fmt::format("unknown mode '{}' (expected 'server' or 'client')", args[0]));
    }
    ++i;
  }
  const auto mode_name = [&] {
    switch (opt.mode) {
      case Mode::kServer:
        return "server";
      case Mode::kClient:
        return "client";
      case Mode::kCombined:
        break;
    }
    return "combined";
  }();

  for (; i < args.size(); ++i) {
    std::string_view arg = args[i];
    if (arg == "-h" || arg == "--help") {
      opt.help = true;
      return opt;
    }
    if (!arg.starts_with("--")) {
      throw UsageError(fmt::format("unexpected argument '{}'", arg));
    }
    // Accept both "--flag value" and "--flag=value".
    std::string_view flag = arg;
    std::optional<std::string_view> inline_value;
    if (const auto eq = arg.find('='); eq != std::string_view::npos) {
      flag = arg.substr(0, eq);
      inline_value = arg.substr(eq + 1);
    }
    const bool server_flag = flag == "--bind";
    const bool client_flag = flag == "--server";
    const bool load_flag =
        flag == "--size" || flag == "--iters" || flag == "--warmup" || flag == "--json";
    if (!server_flag && !client_flag && !load_flag) {
      throw UsageError(fmt::format("unknown option '{}'", flag));
    }
    if ((server_flag && opt.mode != Mode::kServer) || (client_flag && opt.mode != Mode::kClient) ||
        (load_flag && opt.mode == Mode::kServer)) {
      throw UsageError(fmt::format("option '{}' is not valid in {} mode", flag, mode_name));
    }
    std::string_view value;
    if (inline_value) {
      value = *inline_value;
    } else {
      if (i + 1 >= args.size()) {
        throw UsageError(fmt::format("option '{}' requires a value", flag));
      }
      value = args[++i];
    }
    if (flag == "--bind") {
      ParseEndpoint(flag, value);  // validate early
      opt.bind = std::string(value);
    } else if (flag == "--server") {
      ParseEndpoint(flag, value);
      opt.server = std::string(value);
    } else if (flag == "--size") {
      opt.size = static_cast<std::size_t>(ParseUnsigned(flag, value, 1, kMaxUdpPayload));
    } else if (flag == "--iters") {
      opt.iters = ParseUnsigned(flag, value, 1, std::numeric_limits<std::uint32_t>::max());
    } else if (flag == "--warmup") {
      opt.warmup = ParseUnsigned(flag, value, 0, std::numeric_limits<std::uint32_t>::max());
    } else if (flag == "--json") {
      if (value.empty()) throw UsageError("--json: empty file name");
      opt.json = std::string(value);
    }
  }
  if (opt.mode == Mode::kClient && !opt.server) {
    throw UsageError("client mode requires --server IP:PORT");
  }
  return opt;
}

// ---------------------------------------------------------------------------
// Sockets

class Socket {
 public:
  Socket() {
    fd_ = ::socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd_ < 0) ThrowErrno("socket");
    // Generous buffers so bursts during batching are not dropped.
    const int bytes = 4 << 20;
    (void)::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes);
    (void)::setsockopt(fd_, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
  }
  ~Socket() {
    if (fd_ >= 0) ::close(fd_);
  }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  int fd() const { return fd_; }

  void Bind(const sockaddr_in& addr) {
    if (::bind(fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
      ThrowErrno(fmt::format("bind {}", FormatAddr(addr)));
    }
  }

  sockaddr_in LocalAddr() const {
    sockaddr_in addr{};
    socklen_t len = sizeof addr;
    if (::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      ThrowErrno("getsockname");
    }
    return addr;
  }

  static std::string FormatAddr(const sockaddr_in& addr) {
    char buf[INET_ADDRSTRLEN] = {};
    ::inet_ntop(AF_INET, &addr.sin_addr, buf, sizeof buf);
    return fmt::format("{}:{}", buf, ntohs(addr.sin_port));
  }

 private:
  int fd_ = -1;
};

// ---------------------------------------------------------------------------
// Echo server

// Busy-polls `sock` and echoes every datagram back to its sender. Returns when
// a 0-length datagram arrives (if stop_on_empty) or when `stop` becomes true.
void RunEchoServer(Socket& sock, bool stop_on_empty, const std::atomic<bool>& stop) {
  struct Slot {
    std::array<char, kMaxUdpPayload> data;
    sockaddr_storage from;
  };
  std::vector<Slot> slots(kBatch);
  std::array<iovec, kBatch> rx_iov{};
  std::array<mmsghdr, kBatch> rx{};
  std::array<iovec, kBatch> tx_iov{};
  std::array<mmsghdr, kBatch> tx{};

  for (std::size_t k = 0; k < kBatch; ++k) {
    rx_iov[k] = {slots[k].data.data(), slots[k].data.size()};
    rx[k].msg_hdr.msg_iov = &rx_iov[k];
    rx[k].msg_hdr.msg_iovlen = 1;
    rx[k].msg_hdr.msg_name = &slots[k].from;
  }

  bool stop_requested = false;
  while (!stop_requested && !stop.load(std::memory_order_relaxed)) {
    for (std::size_t k = 0; k < kBatch; ++k) {
      rx[k].msg_hdr.msg_namelen = sizeof(sockaddr_storage);
      rx[k].msg_hdr.msg_flags = 0;
    }
    const int got = ::recvmmsg(sock.fd(), rx.data(), kBatch, MSG_DONTWAIT, nullptr);
    if (got < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) continue;
      // Stray ICMP errors from a vanished client must not kill the server.
      if (errno == ECONNREFUSED) continue;
      ThrowErrno("recvmmsg");
    }

    unsigned n_tx = 0;
    for (int k = 0; k < got; ++k) {
      const mmsghdr& m = rx[static_cast<std::size_t>(k)];
      if (m.msg_len == 0) {
        if (stop_on_empty) stop_requested = true;
        continue;
      }
      tx_iov[n_tx] = {m.msg_hdr.msg_iov->iov_base, m.msg_len};
      tx[n_tx].msg_hdr = {};
      tx[n_tx].msg_hdr.msg_name = m.msg_hdr.msg_name;
      tx[n_tx].msg_hdr.msg_namelen = m.msg_hdr.msg_namelen;
      tx[n_tx].msg_hdr.msg_iov = &tx_iov[n_tx];
      tx[n_tx].msg_hdr.msg_iovlen = 1;
      ++n_tx;
    }

    unsigned sent = 0;
    while (sent < n_tx) {
      const int r = ::sendmmsg(sock.fd(), tx.data() + sent, n_tx - sent, MSG_DONTWAIT);
      if (r < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) continue;
        // Unreachable/refused peer: drop that one datagram and carry on.
        if (errno == ECONNREFUSED || errno == EHOSTUNREACH || errno == ENETUNREACH) {
          ++sent;
          continue;
        }
        ThrowErrno("sendmmsg");
      }
      sent += static_cast<unsigned>(r);
    }
  }
}

// ---------------------------------------------------------------------------
// Client

struct Results {
  std::size_t size = 0;
  std::vector<std::int64_t> rtt_ns;  // sorted after the run
  std::uint64_t lost = 0;
};

// Sends one datagram and busy-polls for its echo. Returns the round-trip time
// in ns, or nullopt if no matching reply arrived within kReplyTimeout.
class PingClient {
 public:
  PingClient(const sockaddr_in& server, std::size_t size)
      : server_(server), size_(size), tx_(size), rx_(kMaxUdpPayload) {
    for (std::size_t k = 0; k < size_; ++k) tx_[k] = static_cast<char>('a' + k % 26);
  }

  std::optional<std::int64_t> RoundTrip(std::uint64_t seq) {
    // Tag the payload with (the low bytes of) the sequence number so a late
    // echo of a timed-out request is never mistaken for the current one.
    const std::size_t tag = std::min(sizeof seq, size_);
    std::memcpy(tx_.data(), &seq, tag);

    const auto t0 = Clock::now();
    Send(tx_.data(), size_);
    for (std::uint32_t spins = 1;; ++spins) {
      const ssize_t n =
          ::recvfrom(sock_.fd(), rx_.data(), rx_.size(), MSG_DONTWAIT, nullptr, nullptr);
      if (n >= 0) {
        if (static_cast<std::size_t>(n) == size_ && std::memcmp(rx_.data(), tx_.data(), tag) == 0) {
          const auto t1 = Clock::now();
          return std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count();
        }
        continue;  // stale or foreign datagram
      }
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNREFUSED) {
        ThrowErrno("recvfrom");
      }
      if ((spins & 0xfff) == 0 && Clock::now() - t0 > kReplyTimeout) return std::nullopt;
    }
  }

  void SendStop() { Send(tx_.data(), 0); }

 private:
  void Send(const char* data, std::size_t len) {
    for (;;) {
      const ssize_t r = ::sendto(sock_.fd(), data, len, 0,
                                 reinterpret_cast<const sockaddr*>(&server_), sizeof server_);
      if (r >= 0) return;
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) continue;
      ThrowErrno(fmt::format("sendto {}", Socket::FormatAddr(server_)));
    }
  }

  Socket sock_;
  sockaddr_in server_;
  std::size_t size_;
  std::vector<char> tx_;
  std::vector<char> rx_;
};

Results RunClient(PingClient& client, const Options& opt) {
  Results res;
  res.size = opt.size;
  res.rtt_ns.reserve(static_cast<std::size_t>(opt.iters));
  std::uint64_t seq = 0;
  int consecutive_lost = 0;
  const auto one = [&](bool measure) {
    const auto rtt = client.RoundTrip(seq++);
    if (rtt) {
      consecutive_lost = 0;
      if (measure) res.rtt_ns.push_back(*rtt);
      return;
    }
    if (measure) ++res.lost;
    if (++consecutive_lost >= kMaxConsecutiveLost) {
      throw RunError(
          fmt::format("no reply from server for {} consecutive requests ({} s timeout "
                      "each); is the server running?",
                      consecutive_lost, kReplyTimeout.count()));
    }
  };
  for (std::uint64_t k = 0; k < opt.warmup; ++k) one(false);
  for (std::uint64_t k = 0; k < opt.iters; ++k) one(true);
  std::sort(res.rtt_ns.begin(), res.rtt_ns.end());
  return res;
}

// Nearest-rank percentile of a sorted, non-empty sample, in microseconds.
double PercentileUs(const std::vector<std::int64_t>& sorted, double p) {
  const auto n = sorted.size();
  auto rank = static_cast<std::size_t>(std::ceil(p / 100.0 * static_cast<double>(n)));
  rank = std::clamp<std::size_t>(rank, 1, n);
  return static_cast<double>(sorted[rank - 1]) / 1000.0;
}

void Report(const Results& res, const std::optional<std::string>& json_path) {
  const auto& s = res.rtt_ns;
  if (s.empty()) throw RunError("no round trips completed");
  const double p50 = PercentileUs(s, 50);
  const double p90 = PercentileUs(s, 90);
  const double p99 = PercentileUs(s, 99);
  const double p999 = PercentileUs(s, 99.9);
  const double max = static_cast<double>(s.back()) / 1000.0;
  const double min = static_cast<double>(s.front()) / 1000.0;
  const double mean = static_cast<double>(std::accumulate(s.begin(), s.end(), std::int64_t{0})) /
                      static_cast<double>(s.size()) / 1000.0;

  fmt::print(
      "udp_pingpong size={} B iters={} p50={:.2f} us p90={:.2f} us p99={:.2f} us "
      "p99.9={:.2f} us max={:.2f} us{}\n",
      res.size, s.size(), p50, p90, p99, p999, max,
      res.lost ? fmt::format(" lost={}", res.lost) : std::string());
  std::fflush(stdout);

  if (json_path) {
    std::FILE* f = std::fopen(json_path->c_str(), "w");
    if (!f) ThrowErrno(fmt::format("cannot open {}", *json_path));
    fmt::print(f,
               "{{\"system\":\"raw_udp_pingpong\",\"size\":{},\"iters\":{},\"lost\":{},"
               "\"p50_us\":{:.3f},\"p90_us\":{:.3f},\"p99_us\":{:.3f},\"p999_us\":{:.3f},"
               "\"max_us\":{:.3f},\"min_us\":{:.3f},\"mean_us\":{:.3f}}}\n",
               res.size, s.size(), res.lost, p50, p90, p99, p999, max, min, mean);
    const bool write_failed = std::ferror(f) != 0;
    if (std::fclose(f) != 0 || write_failed) ThrowErrno(fmt::format("writing {}", *json_path));
  }
}

// ---------------------------------------------------------------------------
// Modes

int RunServerMode(const Options& opt) {
  Socket sock;
  sock.Bind(ParseEndpoint("--bind", opt.bind));
  fmt::print("udp_pingpong server: busy-polling on {} (batch {}), Ctrl-C to stop\n",
             Socket::FormatAddr(sock.LocalAddr()), kBatch);
  std::fflush(stdout);
  const std::atomic<bool> never{false};
  RunEchoServer(sock, /*stop_on_empty=*/false, never);
  return 0;
}

int RunClientMode(const Options& opt) {
  PingClient client(ParseEndpoint("--server", *opt.server), opt.size);
  Report(RunClient(client, opt), opt.json);
  return 0;
}

bool PinThread(pthread_t thread, int cpu, std::string_view who) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (const int rc = pthread_setaffinity_np(thread, sizeof set, &set); rc != 0) {
    fmt::print(stderr, "udp_pingpong: warning: cannot pin {} to CPU {}: {}\n", who, cpu,
               std::strerror(rc));
    return false;
  }
  return true;
}

int RunCombinedMode(const Options& opt) {
  // Decide on pinning: both CPU 0 and CPU 1 must be available to us.
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  bool can_pin = false;
  if (sched_getaffinity(0, sizeof allowed, &allowed) == 0) {
    can_pin = CPU_COUNT(&allowed) >= 2 && CPU_ISSET(0, &allowed) && CPU_ISSET(1, &allowed);
  }

  Socket server_sock;
  sockaddr_in bind_addr{};
  bind_addr.sin_family = AF_INET;
  bind_addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind_addr.sin_port = 0;  // ephemeral: never collides with a running server
  server_sock.Bind(bind_addr);
  const sockaddr_in server_addr = server_sock.LocalAddr();

  std::atomic<bool> stop{false};
  std::exception_ptr server_error;
  std::thread server([&] {
    try {
      RunEchoServer(server_sock, /*stop_on_empty=*/true, stop);
    } catch (...) {
      server_error = std::current_exception();
    }
  });

  bool pinned = false;
  if (can_pin) {
    pinned = PinThread(server.native_handle(), 1, "server thread") &&
             PinThread(pthread_self(), 0, "client thread");
  }
  if (pinned) {
    fmt::print(
        "udp_pingpong: combined mode on {}: server thread pinned to CPU 1, client pinned "
        "to CPU 0\n",
        Socket::FormatAddr(server_addr));
  } else {
    fmt::print(
        "udp_pingpong: combined mode on {}: NOT pinned ({}); server and client threads "
        "float\n",
        Socket::FormatAddr(server_addr),
        can_pin ? "pthread_setaffinity_np failed" : "CPUs 0 and 1 not both available");
  }
  std::fflush(stdout);

  Results res;
  std::exception_ptr client_error;
  try {
    PingClient client(server_addr, opt.size);
    res = RunClient(client, opt);
    client.SendStop();
  } catch (...) {
    client_error = std::current_exception();
  }
  stop.store(true, std::memory_order_relaxed);  // in case the stop datagram was not seen
  server.join();

  if (server_error) std::rethrow_exception(server_error);
  if (client_error) std::rethrow_exception(client_error);
  Report(res, opt.json);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  try {
    opt = ParseArgs(argc, argv);
  } catch (const UsageError& e) {
    fmt::print(stderr, "udp_pingpong: error: {}\n", e.what());
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
      case Mode::kCombined:
        return RunCombinedMode(opt);
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "udp_pingpong: error: {}\n", e.what());
    return 1;
  }
  return 1;
}
