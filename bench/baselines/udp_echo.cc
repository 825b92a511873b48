// Raw UDP echo rate: the "limit of the path" baseline that librpc's small-RPC
// request rate is compared to. libc, the C++ standard library, fmt and the
// baseline scaffold (scaffold.h, tools/measure) only.
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
// runs until killed. Results: bench/compare/SCHEMA.md, workload "rate",
// --json / --csv.

#include <fmt/core.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "scaffold.h"
#include "udp_socket.h"

namespace {

using baseline::Clock;
using baseline::format_addr;
using baseline::is_transient;
using baseline::RunError;
using baseline::throw_errno;
using baseline::UdpSocket;

constexpr std::size_t kMaxUdpPayload = 65507;  // IPv4 UDP maximum
constexpr std::size_t kSeqBytes = sizeof(std::uint64_t);
constexpr std::size_t kMaxWindow = 1024;
constexpr int kSocketBufferBytes = 16 << 20;
constexpr auto kStallTimeout = std::chrono::milliseconds(5);
constexpr auto kDeadServerTimeout = std::chrono::seconds(1);

struct Options {
  std::size_t size = 32;
  std::size_t window = 8;
  std::size_t batch = 32;  // = UdpTransport::kMaxBatch
  double duration_s = 5.0;
  double warmup_s = 0.5;
};

void add_load_options(CLI::App& app, Options& opt) {
  app.add_option("--size", opt.size, "datagram payload bytes")
      ->check(CLI::Range(kSeqBytes, kMaxUdpPayload))
      ->capture_default_str();
  app.add_option("--window", opt.window, "datagrams outstanding")
      ->check(CLI::Range(std::size_t{1}, kMaxWindow))
      ->capture_default_str();
  baseline::add_interval_options(app, opt.duration_s, opt.warmup_s);
}

// ---------------------------------------------------------------------------
// Echo server

// Busy-polls `sock` and echoes every datagram back to its sender, `batch` at a
// time. Returns when a 0-length datagram arrives (if stop_on_empty) or when
// `stop` becomes true.
void run_echo_server(UdpSocket& sock, std::size_t batch, bool stop_on_empty,
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

  UdpSocket sock_{kSocketBufferBytes};
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

void report(baseline::Program& program, const Options& opt, const std::string& setup,
            const RateResults& res) {
  const double rps = static_cast<double>(res.requests) / res.duration_s;
  fmt::print("udp_echo size={} B window={} batch={} rate={:.2f} Mrps ({} requests in {:.2f} s){}\n",
             opt.size, opt.window, opt.batch, rps / 1e6, res.requests, res.duration_s,
             res.stalls ? fmt::format(" lost={} stalls={}", res.lost, res.stalls) : std::string());
  if (res.stalls != 0) {
    program.warn(fmt::format("{} stalls wrote off {} datagrams (echoes lost or late)", res.stalls,
                             res.lost));
  }
  program.check_trust();
  std::fflush(stdout);
  program.describe("udp", "rate", setup,
                   {{"size", opt.size},
                    {"window", opt.window},
                    {"batch", opt.batch},
                    {"duration_s", opt.duration_s},
                    {"warmup_s", opt.warmup_s}});
  program.result().results.push_back({{"size", opt.size},
                                      {"window", opt.window},
                                      {"sessions", 1},
                                      {"client_threads", 1},
                                      {"server_threads", 1},
                                      {"batch", opt.batch},
                                      {"duration_s", measure::round_to(res.duration_s, 6)},
                                      {"requests", res.requests},
                                      {"rps", measure::round_to(rps, 1)},
                                      {"rps_per_client_thread", measure::round_to(rps, 1)},
                                      {"rps_per_server_thread", measure::round_to(rps, 1)},
                                      {"lost", res.lost},
                                      {"stalls", res.stalls}});
  program.write_outputs();
}

// ---------------------------------------------------------------------------
// Modes

int run_server_mode(const std::string& bind, const Options& opt) {
  UdpSocket sock(kSocketBufferBytes);
  sock.bind(baseline::parse_endpoint("--bind", bind));
  fmt::print("udp_echo server: busy-polling on {} (batch {}), Ctrl-C to stop\n",
             format_addr(sock.local_addr()), opt.batch);
  std::fflush(stdout);
  const std::atomic<bool> never{false};
  run_echo_server(sock, opt.batch, /*stop_on_empty=*/false, never);
  return 0;
}

int run_client_mode(baseline::Program& program, const std::string& server_text,
                    const Options& opt) {
  const sockaddr_in server = baseline::parse_endpoint("--server", server_text);
  EchoClient client(server, opt);
  const RateResults res =
      program.measured(1, [&] { return client.run(opt.warmup_s, opt.duration_s); });
  report(program, opt,
         fmt::format("client (1 thread, unpinned) of udp_echo server {}; sendmmsg/recvmmsg "
                     "batch {}; busy-polled",
                     format_addr(server), opt.batch),
         res);
  return 0;
}

int run_combined_mode(baseline::Program& program, const Options& opt) {
  UdpSocket server_sock(kSocketBufferBytes);
  server_sock.bind(baseline::loopback_any_port());
  const sockaddr_in server_addr = server_sock.local_addr();
  RateResults res;
  const std::string pinning = baseline::run_both(
      "udp_echo", server_addr,
      [&](const std::atomic<bool>& stop) {
        run_echo_server(server_sock, opt.batch, /*stop_on_empty=*/true, stop);
      },
      [&] {
        EchoClient client(server_addr, opt);
        res = program.measured(2, [&] { return client.run(opt.warmup_s, opt.duration_s); });
        client.send_stop();
      });
  report(program, opt,
         fmt::format("combined: 1 process over 127.0.0.1, {}; sendmmsg/recvmmsg batch {}; "
                     "busy-polled",
                     pinning, opt.batch),
         res);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  baseline::Program program("udp_echo", "raw_udp",
                            "Raw UDP echo rate with sendmmsg/recvmmsg batching: the request-rate "
                            "limit librpc's small-RPC throughput is compared to.",
                            argc, argv);
  Options opt;
  baseline::Modes modes(
      program, "0.0.0.0:7778",
      {.client = [&](CLI::App& app) { add_load_options(app, opt); },
       .shared = [&](CLI::App& app) { baseline::add_batch_option(app, opt.batch); }});
  return program.run(argc, argv, [&] {
    if (modes.server()) return run_server_mode(modes.bind, opt);
    if (modes.client()) return run_client_mode(program, modes.server_address, opt);
    return run_combined_mode(program, opt);
  });
}
