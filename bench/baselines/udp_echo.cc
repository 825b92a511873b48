// Raw UDP echo rate: the "limit of the path" baseline that librpc's small-RPC
// request rate is compared to. Self-contained: libc + C++ std + fmt only.
//
//   udp_echo server [--bind IP:PORT] [--batch N]
//   udp_echo client --server IP:PORT [LOAD OPTIONS]
//   udp_echo [LOAD OPTIONS]            (both in one process, over 127.0.0.1)
//
// Both sides batch the way librpc's udp transport does: nonblocking sockets,
// busy-polled (MSG_DONTWAIT), datagrams moved in sendmmsg/recvmmsg batches of
// up to --batch. The server receives a batch and sends every datagram straight
// back to its sender. The client keeps --window datagrams of --size bytes
// outstanding, each tagged with a 64-bit sequence number: every poll round it
// receives a batch of echoes, then tops the window back up with sendmmsg
// batches. It counts echoes per second over --duration, after --warmup-seconds.
//
// Loss: when a receive queue overflows, echoes never come back and the window
// would stall. After kStallTimeout without any echo the client writes off all
// outstanding datagrams (reported as `lost`), ignores late echoes of them
// (their sequence numbers precede the new epoch's first) and re-primes the
// window. No echo at all for kDeadServerTimeout fails the run.
//
// A 0-length datagram stops the server in combined mode; a standalone server
// runs until killed.

#include <arpa/inet.h>
#include <fmt/core.h>
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
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace {

constexpr std::size_t kMaxUdpPayload = 65507;  // IPv4 UDP maximum
constexpr std::size_t kSeqBytes = sizeof(std::uint64_t);
constexpr std::size_t kMaxBatch = 1024;  // UIO_MAXIOV: the kernel's cap on vlen
constexpr std::size_t kMaxWindow = 1024;
constexpr std::size_t kDefaultSize = 32;
constexpr std::size_t kDefaultWindow = 8;
constexpr std::size_t kDefaultBatch = 32;  // = UdpTransport::kMaxBatch
constexpr double kDefaultDurationS = 5.0;
constexpr double kDefaultWarmupS = 0.5;
constexpr double kMaxSeconds = 3600.0;
constexpr int kSocketBufferBytes = 16 << 20;
constexpr std::string_view kDefaultBind = "0.0.0.0:7778";
constexpr auto kStallTimeout = std::chrono::milliseconds(5);
constexpr auto kDeadServerTimeout = std::chrono::seconds(1);

using Clock = std::chrono::steady_clock;

// Bad command line: reported with the usage text, exit status 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Operational failure (socket error, unresponsive server): exit status 1.
struct RunError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

[[noreturn]] void throw_errno(std::string_view what) {
  throw RunError(fmt::format("{}: {}", what, std::strerror(errno)));
}

bool is_transient(int err) {
  return err == EAGAIN || err == EWOULDBLOCK || err == EINTR || err == ENOBUFS;
}

void print_usage(std::FILE* out) {
  fmt::print(out,
             "usage:\n"
             "  udp_echo [LOAD OPTIONS]\n"
             "      combined mode: echo server thread (CPU 1) + client (CPU 0) over 127.0.0.1\n"
             "  udp_echo server [--bind IP:PORT] [--batch N]\n"
             "      echo server, default bind {}; runs until killed\n"
             "  udp_echo client --server IP:PORT [LOAD OPTIONS]\n"
             "\n"
             "load options:\n"
             "  --size BYTES            datagram payload, {}..{} (default {})\n"
             "  --window W              datagrams outstanding, 1..{} (default {})\n"
             "  --batch N               datagrams per sendmmsg/recvmmsg, 1..{} (default {})\n"
             "  --duration SECONDS      measured interval (default {})\n"
             "  --warmup-seconds S      unmeasured interval before it (default {})\n"
             "  --json FILE             also write the result as JSON (bench/compare/SCHEMA.md)\n"
             "  -h, --help              show this help\n",
             kDefaultBind, kSeqBytes, kMaxUdpPayload, kDefaultSize, kMaxWindow, kDefaultWindow,
             kMaxBatch, kDefaultBatch, kDefaultDurationS, kDefaultWarmupS);
}

// ---------------------------------------------------------------------------
// Argument parsing

enum class Mode { kCombined, kServer, kClient };

struct Options {
  Mode mode = Mode::kCombined;
  std::string bind{kDefaultBind};
  std::optional<std::string> server;
  std::size_t size = kDefaultSize;
  std::size_t window = kDefaultWindow;
  std::size_t batch = kDefaultBatch;
  double duration_s = kDefaultDurationS;
  double warmup_s = kDefaultWarmupS;
  std::optional<std::string> json;
  bool help = false;
};

std::size_t parse_size(std::string_view flag, std::string_view text, std::size_t min,
                       std::size_t max) {
  std::size_t value = 0;
  const char* last = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), last, value);
  if (text.empty() || ec == std::errc::invalid_argument || ptr != last) {
    throw UsageError(fmt::format("{}: '{}' is not a non-negative integer", flag, text));
  }
  if (ec == std::errc::result_out_of_range || value < min || value > max) {
    throw UsageError(fmt::format("{}: {} is out of range [{}, {}]", flag, text, min, max));
  }
  return value;
}

double parse_seconds(std::string_view flag, std::string_view text, bool allow_zero) {
  double value = 0;
  const char* last = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), last, value);
  if (text.empty() || ec != std::errc() || ptr != last || !std::isfinite(value)) {
    throw UsageError(fmt::format("{}: '{}' is not a number of seconds", flag, text));
  }
  if (value < 0 || (value == 0 && !allow_zero) || value > kMaxSeconds) {
    throw UsageError(fmt::format("{}: {} is out of range ({}{}, {}]", flag, text,
                                 allow_zero ? "[" : "(", 0, kMaxSeconds));
  }
  return value;
}

sockaddr_in parse_endpoint(std::string_view flag, std::string_view text) {
  const auto colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 == text.size()) {
    throw UsageError(fmt::format("{}: '{}' is not of the form IPV4:PORT", flag, text));
  }
  const std::string host(text.substr(0, colon));
  const auto port = parse_size(flag, text.substr(colon + 1), 0, 65535);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    throw UsageError(fmt::format("{}: '{}' is not an IPv4 address", flag, host));
  }
  return addr;
}

const char* mode_name(Mode mode) {
  switch (mode) {
    case Mode::kServer:
      return "server";
    case Mode::kClient:
      return "client";
    case Mode::kCombined:
      break;
  }
  return "combined";
}

// Is `flag` known, and valid in `mode`? Throws UsageError otherwise.
void check_flag(std::string_view flag, Mode mode) {
  const bool server_flag = flag == "--bind";
  const bool client_flag = flag == "--server";
  const bool any_flag = flag == "--batch";
  const bool load_flag = flag == "--size" || flag == "--window" || flag == "--duration" ||
                         flag == "--warmup-seconds" || flag == "--json";
  if (!server_flag && !client_flag && !any_flag && !load_flag) {
    throw UsageError(fmt::format("unknown option '{}'", flag));
  }
  if ((server_flag && mode != Mode::kServer) || (client_flag && mode != Mode::kClient) ||
      (load_flag && mode == Mode::kServer)) {
    throw UsageError(fmt::format("option '{}' is not valid in {} mode", flag, mode_name(mode)));
  }
}

void apply_flag(Options& opt, std::string_view flag, std::string_view value) {
  if (flag == "--bind") {
    parse_endpoint(flag, value);  // validate early
    opt.bind = std::string(value);
  } else if (flag == "--server") {
    parse_endpoint(flag, value);
    opt.server = std::string(value);
  } else if (flag == "--size") {
    opt.size = parse_size(flag, value, kSeqBytes, kMaxUdpPayload);
  } else if (flag == "--window") {
    opt.window = parse_size(flag, value, 1, kMaxWindow);
  } else if (flag == "--batch") {
    opt.batch = parse_size(flag, value, 1, kMaxBatch);
  } else if (flag == "--duration") {
    opt.duration_s = parse_seconds(flag, value, /*allow_zero=*/false);
  } else if (flag == "--warmup-seconds") {
    opt.warmup_s = parse_seconds(flag, value, /*allow_zero=*/true);
  } else if (flag == "--json") {
    if (value.empty()) throw UsageError("--json: empty file name");
    opt.json = std::string(value);
  }
}

Options parse_args(int argc, char** argv) {
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
  for (; i < args.size(); ++i) {
    const std::string_view arg = args[i];
    if (arg == "-h" || arg == "--help") {
      opt.help = true;
      return opt;
    }
    if (!arg.starts_with("--")) throw UsageError(fmt::format("unexpected argument '{}'", arg));
    // Accept both "--flag value" and "--flag=value".
    std::string_view flag = arg;
    std::string_view value;
    if (const auto eq = arg.find('='); eq != std::string_view::npos) {
      flag = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      check_flag(flag, opt.mode);
    } else {
      check_flag(flag, opt.mode);
      if (i + 1 >= args.size()) {
        throw UsageError(fmt::format("option '{}' requires a value", flag));
      }
      value = args[++i];
    }
    apply_flag(opt, flag, value);
  }
  if (opt.mode == Mode::kClient && !opt.server) {
    throw UsageError("client mode requires --server IP:PORT");
  }
  return opt;
}

// ---------------------------------------------------------------------------
// Sockets

// Sets a socket buffer size, beyond net.core.*mem_max when we may (root).
void set_buffer_bytes(int fd, int force_opt, int opt, int bytes) {
  if (::setsockopt(fd, SOL_SOCKET, force_opt, &bytes, sizeof bytes) == 0) return;
  (void)::setsockopt(fd, SOL_SOCKET, opt, &bytes, sizeof bytes);
}

std::string format_addr(const sockaddr_in& addr) {
  char buf[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &addr.sin_addr, buf, sizeof buf);
  return fmt::format("{}:{}", buf, ntohs(addr.sin_port));
}

// A nonblocking IPv4 UDP socket with large buffers; owns the descriptor.
class Socket {
 public:
  Socket() {
    fd_ = ::socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd_ < 0) throw_errno("socket");
    set_buffer_bytes(fd_, SO_RCVBUFFORCE, SO_RCVBUF, kSocketBufferBytes);
    set_buffer_bytes(fd_, SO_SNDBUFFORCE, SO_SNDBUF, kSocketBufferBytes);
  }
  ~Socket() {
    if (fd_ >= 0) ::close(fd_);
  }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  int fd() const { return fd_; }

  void bind(const sockaddr_in& addr) {
    if (::bind(fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
      throw_errno(fmt::format("bind {}", format_addr(addr)));
    }
  }

  sockaddr_in local_addr() const {
    sockaddr_in addr{};
    socklen_t len = sizeof addr;
    if (::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      throw_errno("getsockname");
    }
    return addr;
  }

 private:
  int fd_ = -1;
};

// ---------------------------------------------------------------------------
// Echo server

// Busy-polls `sock` and echoes every datagram back to its sender, `batch` at a
// time. Returns when a 0-length datagram arrives (if stop_on_empty) or when
// `stop` becomes true.
void run_echo_server(Socket& sock, std::size_t batch, bool stop_on_empty,
                     const std::atomic<bool>& stop) {
  // Not zero-filled: only the pages datagrams land in get touched.
  auto data = std::make_unique_for_overwrite<char[]>(batch * kMaxUdpPayload);
  std::vector<sockaddr_storage> from(batch);
  std::vector<iovec> rx_iov(batch);
  std::vector<mmsghdr> rx(batch);
  std::vector<iovec> tx_iov(batch);
  std::vector<mmsghdr> tx(batch);
  for (std::size_t k = 0; k < batch; ++k) {
    rx_iov[k] = {data.get() + k * kMaxUdpPayload, kMaxUdpPayload};
    rx[k].msg_hdr.msg_iov = &rx_iov[k];
    rx[k].msg_hdr.msg_iovlen = 1;
    rx[k].msg_hdr.msg_name = &from[k];
    tx[k].msg_hdr.msg_iov = &tx_iov[k];
    tx[k].msg_hdr.msg_iovlen = 1;
  }

  const auto vlen = static_cast<unsigned>(batch);
  bool stop_requested = false;
  while (!stop_requested && !stop.load(std::memory_order_relaxed)) {
    for (auto& m : rx) m.msg_hdr.msg_namelen = sizeof(sockaddr_storage);
    const int got = ::recvmmsg(sock.fd(), rx.data(), vlen, MSG_DONTWAIT, nullptr);
    if (got < 0) {
      // Stray ICMP errors from a vanished client must not kill the server.
      if (is_transient(errno) || errno == ECONNREFUSED) continue;
      throw_errno("recvmmsg");
    }

    unsigned n_tx = 0;
    for (std::size_t k = 0; k < static_cast<std::size_t>(got); ++k) {
      const mmsghdr& m = rx[k];
      if (m.msg_len == 0) {
        stop_requested = stop_requested || stop_on_empty;
        continue;
      }
      tx_iov[n_tx] = {m.msg_hdr.msg_iov->iov_base, m.msg_len};
      tx[n_tx].msg_hdr.msg_name = m.msg_hdr.msg_name;
      tx[n_tx].msg_hdr.msg_namelen = m.msg_hdr.msg_namelen;
      ++n_tx;
    }

    unsigned sent = 0;
    while (sent < n_tx && !stop.load(std::memory_order_relaxed)) {
      const int r = ::sendmmsg(sock.fd(), tx.data() + sent, n_tx - sent, MSG_DONTWAIT);
      if (r >= 0) {
        sent += static_cast<unsigned>(r);
      } else if (errno == ECONNREFUSED || errno == EHOSTUNREACH || errno == ENETUNREACH) {
        ++sent;  // unreachable peer: drop that one datagram and carry on
      } else if (!is_transient(errno)) {
        throw_errno("sendmmsg");
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Client

struct RateResults {
  std::uint64_t requests = 0;  // echoes received in the measured interval
  double duration_s = 0;       // measured interval, as timed
  std::uint64_t lost = 0;      // written off on stalls in the measured interval
  std::uint64_t stalls = 0;    // window re-primes in the measured interval
};

// Keeps `window` sequence-numbered datagrams outstanding to an echo server.
// Single-threaded.
class EchoClient {
 public:
  EchoClient(const sockaddr_in& server, const Options& opt)
      : server_(server),
        size_(opt.size),
        window_(opt.window),
        batch_(opt.batch),
        tx_data_(batch_ * size_, 'x'),
        rx_data_(batch_ * size_),
        tx_iov_(batch_),
        rx_iov_(batch_),
        tx_(batch_),
        rx_(batch_) {
    for (std::size_t k = 0; k < batch_; ++k) {
      tx_iov_[k] = {tx_data_.data() + k * size_, size_};
      tx_[k].msg_hdr.msg_iov = &tx_iov_[k];
      tx_[k].msg_hdr.msg_iovlen = 1;
      // Unconnected, destination per datagram: as librpc's udp transport does.
      tx_[k].msg_hdr.msg_name = &server_;
      tx_[k].msg_hdr.msg_namelen = sizeof server_;
      rx_iov_[k] = {rx_data_.data() + k * size_, size_};
      rx_[k].msg_hdr.msg_iov = &rx_iov_[k];
      rx_[k].msg_hdr.msg_iovlen = 1;
    }
  }

  RateResults run(double warmup_s, double duration_s);

  // Asks a combined-mode server to return.
  void send_stop() {
    (void)::sendto(sock_.fd(), nullptr, 0, 0, reinterpret_cast<const sockaddr*>(&server_),
                   sizeof server_);
  }

 private:
  std::size_t receive_echoes();
  void top_up_window();

  // Forgets every outstanding datagram; late echoes of them are then ignored.
  void write_off_window() {
    epoch_first_seq_ = next_seq_;
    outstanding_ = 0;
  }

  Socket sock_;
  sockaddr_in server_;
  std::size_t size_;
  std::size_t window_;
  std::size_t batch_;
  std::vector<char> tx_data_;
  std::vector<char> rx_data_;
  std::vector<iovec> tx_iov_;
  std::vector<iovec> rx_iov_;
  std::vector<mmsghdr> tx_;
  std::vector<mmsghdr> rx_;
  std::uint64_t next_seq_ = 0;
  std::uint64_t epoch_first_seq_ = 0;  // echoes of older sequence numbers are stale
  std::size_t outstanding_ = 0;
};

// Receives one batch; returns how many were echoes of outstanding datagrams.
std::size_t EchoClient::receive_echoes() {
  const int got =
      ::recvmmsg(sock_.fd(), rx_.data(), static_cast<unsigned>(batch_), MSG_DONTWAIT, nullptr);
  if (got < 0) {
    if (is_transient(errno) || errno == ECONNREFUSED) return 0;
    throw_errno("recvmmsg");
  }
  std::size_t echoes = 0;
  for (std::size_t k = 0; k < static_cast<std::size_t>(got); ++k) {
    const mmsghdr& m = rx_[k];
    if (m.msg_len != size_ || (m.msg_hdr.msg_flags & MSG_TRUNC) != 0) continue;
    std::uint64_t seq = 0;
    std::memcpy(&seq, rx_iov_[k].iov_base, kSeqBytes);
    if (seq >= epoch_first_seq_ && seq < next_seq_) ++echoes;
  }
  outstanding_ -= std::min(echoes, outstanding_);
  return echoes;
}

// Sends new datagrams until `window_` are outstanding or the socket pushes back.
void EchoClient::top_up_window() {
  while (outstanding_ < window_) {
    const std::size_t n = std::min(window_ - outstanding_, batch_);
    for (std::size_t k = 0; k < n; ++k) {
      const std::uint64_t seq = next_seq_ + k;
      std::memcpy(tx_iov_[k].iov_base, &seq, kSeqBytes);
    }
    const int r = ::sendmmsg(sock_.fd(), tx_.data(), static_cast<unsigned>(n), MSG_DONTWAIT);
    if (r < 0) {
      if (is_transient(errno) || errno == ECONNREFUSED) return;  // retry next round
      throw_errno(fmt::format("sendmmsg {}", format_addr(server_)));
    }
    next_seq_ += static_cast<std::uint64_t>(r);
    outstanding_ += static_cast<std::size_t>(r);
    if (static_cast<std::size_t>(r) < n) return;
  }
}

RateResults EchoClient::run(double warmup_s, double duration_s) {
  using Seconds = std::chrono::duration<double>;
  const auto start = Clock::now();
  const auto measure_at = start + std::chrono::duration_cast<Clock::duration>(Seconds(warmup_s));
  const auto end_at = measure_at + std::chrono::duration_cast<Clock::duration>(Seconds(duration_s));

  std::uint64_t echoes = 0, lost = 0, stalls = 0;
  std::optional<Clock::time_point> t0;
  RateResults base;  // counters at the start of the measured interval
  auto last_echo = start, last_progress = start;
  top_up_window();
  for (;;) {
    const std::size_t got = receive_echoes();
    const auto now = Clock::now();
    if (got > 0) {
      echoes += got;
      last_echo = last_progress = now;
    } else if (now - last_progress > kStallTimeout) {
      if (now - last_echo > kDeadServerTimeout) {
        throw RunError(fmt::format("no echo from {} for {} s; is the server running?",
                                   format_addr(server_), kDeadServerTimeout.count()));
      }
      lost += outstanding_;
      ++stalls;
      write_off_window();
      last_progress = now;
    }
    if (!t0 && now >= measure_at) {
      t0 = now;
      base = {echoes, 0, lost, stalls};
    }
    if (now >= end_at) {
      return {echoes - base.requests, Seconds(now - *t0).count(), lost - base.lost,
              stalls - base.stalls};
    }
    top_up_window();
  }
}

// ---------------------------------------------------------------------------
// Reporting

void write_json(const std::string& path, const Options& opt, const std::string& setup,
                const RateResults& res, double rps) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) throw_errno(fmt::format("cannot open {}", path));
  // `setup` is built by this program from addresses and numbers: no escaping needed.
  fmt::print(f,
             "{{\"system\":\"raw_udp\",\"transport\":\"udp\",\"workload\":\"rate\","
             "\"setup\":\"{}\",\"results\":[{{\"size\":{},\"window\":{},\"sessions\":1,"
             "\"client_threads\":1,\"server_threads\":1,\"batch\":{},\"duration_s\":{:.6f},"
             "\"requests\":{},\"rps\":{:.1f},\"rps_per_client_thread\":{:.1f},"
             "\"rps_per_server_thread\":{:.1f},\"lost\":{},\"stalls\":{}}}]}}\n",
             setup, opt.size, opt.window, opt.batch, res.duration_s, res.requests, rps, rps, rps,
             res.lost, res.stalls);
  const bool write_failed = std::ferror(f) != 0;
  if (std::fclose(f) != 0 || write_failed) throw_errno(fmt::format("writing {}", path));
}

void report(const Options& opt, const std::string& setup, const RateResults& res) {
  const double rps = static_cast<double>(res.requests) / res.duration_s;
  fmt::print("udp_echo size={} B window={} batch={} rate={:.2f} Mrps ({} requests in {:.2f} s){}\n",
             opt.size, opt.window, opt.batch, rps / 1e6, res.requests, res.duration_s,
             res.stalls ? fmt::format(" lost={} stalls={}", res.lost, res.stalls) : std::string());
  std::fflush(stdout);
  if (opt.json) write_json(*opt.json, opt, setup, res, rps);
}

// ---------------------------------------------------------------------------
// Modes

int run_server_mode(const Options& opt) {
  Socket sock;
  sock.bind(parse_endpoint("--bind", opt.bind));
  fmt::print("udp_echo server: busy-polling on {} (batch {}), Ctrl-C to stop\n",
             format_addr(sock.local_addr()), opt.batch);
  std::fflush(stdout);
  const std::atomic<bool> never{false};
  run_echo_server(sock, opt.batch, /*stop_on_empty=*/false, never);
  return 0;
}

int run_client_mode(const Options& opt) {
  const sockaddr_in server = parse_endpoint("--server", *opt.server);
  EchoClient client(server, opt);
  const RateResults res = client.run(opt.warmup_s, opt.duration_s);
  report(opt,
         fmt::format("client (1 thread, unpinned) of udp_echo server {}; sendmmsg/recvmmsg "
                     "batch {}; busy-polled",
                     format_addr(server), opt.batch),
         res);
  return 0;
}

bool pin_thread(pthread_t thread, int cpu, std::string_view who) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (const int rc = pthread_setaffinity_np(thread, sizeof set, &set); rc != 0) {
    fmt::print(stderr, "udp_echo: warning: cannot pin {} to CPU {}: {}\n", who, cpu,
               std::strerror(rc));
    return false;
  }
  return true;
}

// Both CPU 0 and CPU 1 must be available to us.
bool can_pin_to_cpus_0_and_1() {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return false;
  return CPU_COUNT(&allowed) >= 2 && CPU_ISSET(0, &allowed) && CPU_ISSET(1, &allowed);
}

int run_combined_mode(const Options& opt) {
  const bool can_pin = can_pin_to_cpus_0_and_1();
  Socket server_sock;
  sockaddr_in bind_addr{};
  bind_addr.sin_family = AF_INET;
  bind_addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind_addr.sin_port = 0;  // ephemeral: never collides with a running server
  server_sock.bind(bind_addr);
  const sockaddr_in server_addr = server_sock.local_addr();

  std::atomic<bool> stop{false};
  std::exception_ptr server_error;
  std::thread server([&] {
    try {
      run_echo_server(server_sock, opt.batch, /*stop_on_empty=*/true, stop);
    } catch (...) {
      server_error = std::current_exception();
    }
  });

  const bool pinned = can_pin && pin_thread(server.native_handle(), 1, "server thread") &&
                      pin_thread(pthread_self(), 0, "client thread");
  const std::string pinning = pinned
                                  ? "server thread pinned to CPU 1, client pinned to CPU 0"
                                  : fmt::format("NOT pinned ({}); server and client threads float",
                                                can_pin ? "pthread_setaffinity_np failed"
                                                        : "CPUs 0 and 1 not both available");
  fmt::print("udp_echo: combined mode on {}: {}\n", format_addr(server_addr), pinning);
  std::fflush(stdout);

  RateResults res;
  std::exception_ptr client_error;
  try {
    EchoClient client(server_addr, opt);
    res = client.run(opt.warmup_s, opt.duration_s);
    client.send_stop();
  } catch (...) {
    client_error = std::current_exception();
  }
  stop.store(true, std::memory_order_relaxed);  // in case the stop datagram was lost
  server.join();

  if (server_error) std::rethrow_exception(server_error);
  if (client_error) std::rethrow_exception(client_error);
  report(opt,
         fmt::format("combined: 1 process over 127.0.0.1, {}; sendmmsg/recvmmsg batch {}; "
                     "busy-polled",
                     pinning, opt.batch),
         res);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  try {
    opt = parse_args(argc, argv);
  } catch (const UsageError& e) {
    fmt::print(stderr, "udp_echo: error: {}\n", e.what());
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
      case Mode::kCombined:
        return run_combined_mode(opt);
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "udp_echo: error: {}\n", e.what());
    return 1;
  }
  return 1;
}
