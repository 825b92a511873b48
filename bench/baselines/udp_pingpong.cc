// Raw UDP busy-poll ping-pong: the "limit of the path" baseline that librpc's
// latency is compared to. libc, the C++ standard library, fmt and the
// baseline scaffold (scaffold.h, tools/measure) only.
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
// Results: bench/compare/SCHEMA.md, workload "latency", --json / --csv.

#include <fmt/core.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "histogram.h"
#include "scaffold.h"
#include "udp_socket.h"

namespace {

using baseline::Clock;
using baseline::RunError;
using baseline::throw_errno;
using baseline::UdpSocket;

constexpr std::size_t kMaxUdpPayload = 65507;  // IPv4 UDP maximum
constexpr std::size_t kBatch = 32;
constexpr int kSocketBufferBytes = 4 << 20;  // bursts during batching are not dropped
constexpr auto kReplyTimeout = std::chrono::seconds(1);
constexpr int kMaxConsecutiveLost = 3;

struct Options {
  std::size_t size = 32;
  std::uint64_t iters = 200000;
  std::uint64_t warmup = 10000;
};

void add_load_options(CLI::App& app, Options& opt) {
  app.add_option("--size", opt.size, "datagram payload bytes")
      ->check(CLI::Range(std::size_t{1}, kMaxUdpPayload))
      ->capture_default_str();
  app.add_option("--iters", opt.iters, "measured round trips")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{UINT32_MAX}))
      ->capture_default_str();
  app.add_option("--warmup", opt.warmup, "unmeasured round trips before measuring")
      ->check(CLI::Range(std::uint64_t{0}, std::uint64_t{UINT32_MAX}))
      ->capture_default_str();
}

// ---------------------------------------------------------------------------
// Echo server

// Busy-polls `sock` and echoes every datagram back to its sender. Returns when
// a 0-length datagram arrives (if stop_on_empty) or when `stop` becomes true.
void RunEchoServer(UdpSocket& sock, bool stop_on_empty, const std::atomic<bool>& stop) {
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
      if (baseline::is_transient(errno)) continue;
      // Stray ICMP errors from a vanished client must not kill the server.
      if (errno == ECONNREFUSED) continue;
      throw_errno("recvmmsg");
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
        if (baseline::is_transient(errno)) continue;
        // Unreachable/refused peer: drop that one datagram and carry on.
        if (errno == ECONNREFUSED || errno == EHOSTUNREACH || errno == ENETUNREACH) {
          ++sent;
          continue;
        }
        throw_errno("sendmmsg");
      }
      sent += static_cast<unsigned>(r);
    }
  }
}

// ---------------------------------------------------------------------------
// Client

struct Results {
  measure::Histogram rtt;
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
      if (!baseline::is_transient(errno) && errno != ECONNREFUSED) {
        throw_errno("recvfrom");
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
      if (baseline::is_transient(errno)) continue;
      throw_errno(fmt::format("sendto {}", baseline::format_addr(server_)));
    }
  }

  UdpSocket sock_{kSocketBufferBytes};
  sockaddr_in server_;
  std::size_t size_;
  std::vector<char> tx_;
  std::vector<char> rx_;
};

// Warm-up, then the measured round trips (between the program's
// start_measurement and finish_measurement, busy-polling busy_cores cores).
Results RunClient(PingClient& client, const Options& opt, baseline::Program& program,
                  int busy_cores) {
  Results res;
  std::uint64_t seq = 0;
  int consecutive_lost = 0;
  const auto one = [&](bool measure) {
    const auto rtt = client.RoundTrip(seq++);
    if (rtt) {
      consecutive_lost = 0;
      if (measure) res.rtt.record(static_cast<std::uint64_t>(*rtt));
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
  program.start_measurement();
  for (std::uint64_t k = 0; k < opt.iters; ++k) one(true);
  program.finish_measurement(busy_cores);
  return res;
}

// Prints the table and the warnings, and writes the result files.
void Report(baseline::Program& program, const Options& opt, const std::string& setup,
            const Results& res) {
  program.describe("udp", "latency", setup,
                   {{"size", opt.size}, {"iters", opt.iters}, {"warmup", opt.warmup}});
  baseline::print_rtt_header(fmt::format("{:>8} {:>8} {:>6}", "size", "iters", "lost"));
  program.result().results.push_back(baseline::rtt_row(
      program, res.rtt, fmt::format("{:>8} {:>8} {:>6}", opt.size, res.rtt.count(), res.lost),
      {{"size", opt.size}, {"iters", res.rtt.count()}, {"lost", res.lost}}));
  if (res.lost != 0) {
    program.warn(
        fmt::format("{} round trips lost (1 s timeout each; not in the percentiles)", res.lost));
  }
  program.check_trust();
  program.write_outputs();
}

// ---------------------------------------------------------------------------
// Modes

int RunServerMode(const std::string& bind) {
  UdpSocket sock(kSocketBufferBytes);
  sock.bind(baseline::parse_endpoint("--bind", bind));
  fmt::print("udp_pingpong server: busy-polling on {} (batch {}), Ctrl-C to stop\n",
             baseline::format_addr(sock.local_addr()), kBatch);
  std::fflush(stdout);
  const std::atomic<bool> never{false};
  RunEchoServer(sock, /*stop_on_empty=*/false, never);
  return 0;
}

int RunClientMode(baseline::Program& program, const Options& opt, const std::string& server) {
  PingClient client(baseline::parse_endpoint("--server", server), opt.size);
  const Results res = RunClient(client, opt, program, 1);
  Report(program, opt,
         fmt::format("client (1 thread, unpinned) of udp_pingpong server {}; busy-polled", server),
         res);
  return 0;
}

int RunCombinedMode(baseline::Program& program, const Options& opt) {
  UdpSocket server_sock(kSocketBufferBytes);
  server_sock.bind(baseline::loopback_any_port());
  const sockaddr_in server_addr = server_sock.local_addr();
  Results res;
  const std::string pinning = baseline::run_both(
      "udp_pingpong", server_addr,
      [&](const std::atomic<bool>& stop) {
        RunEchoServer(server_sock, /*stop_on_empty=*/true, stop);
      },
      [&] {
        PingClient client(server_addr, opt.size);
        res = RunClient(client, opt, program, 2);
        client.SendStop();
      });
  Report(program, opt, fmt::format("combined: 1 process over 127.0.0.1, {}; busy-polled", pinning),
         res);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  baseline::Program program("udp_pingpong", "raw_udp_pingpong",
                            "Raw UDP busy-poll ping-pong: round-trip latency of one datagram "
                            "at a time, the floor librpc's latency is compared to.",
                            argc, argv);
  Options opt;
  baseline::Modes modes(program, "0.0.0.0:7777",
                        {.client = [&](CLI::App& app) { add_load_options(app, opt); }});
  return program.run(argc, argv, [&] {
    if (modes.server()) return RunServerMode(modes.bind);
    if (modes.client()) return RunClientMode(program, opt, modes.server_address);
    return RunCombinedMode(program, opt);
  });
}
