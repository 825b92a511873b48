// Does MSG_ZEROCOPY pay for librpc's large udp sends? Sends GSO datagrams of
// 44 x 1472 B (the largest run librpc's udp transport packs into one send)
// from a 16 MiB buffer to a GRO receiver thread on 127.0.0.1 for one second,
// alternately with plain copies and with MSG_ZEROCOPY, and prints the
// goodput of each and how many zerocopy completions the kernel reported as
// copied anyway (SO_EE_CODE_ZEROCOPY_COPIED). On loopback the kernel copies
// every zerocopy send (the receiving socket cannot keep user pages), so the
// notifications are pure overhead; docs/transports.md has the numbers.
//
//   udp_zerocopy_probe [ROUNDS] [--json FILE] [--csv FILE]
//
// Results: bench/compare/SCHEMA.md, workload "goodput", one result per round
// and mode.
// errqueue.h uses struct timespec without including time.h.
#include <time.h>
// clang-format off
#include <linux/errqueue.h>
// clang-format on
#include <netinet/in.h>
#include <netinet/udp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "scaffold.h"

namespace {

constexpr int kSegmentBytes = 1472;
constexpr int kSegmentsPerSend = 44;
constexpr size_t kSendBytes = size_t{kSegmentBytes} * kSegmentsPerSend;
constexpr size_t kBufferBytes = size_t{16} << 20;
constexpr int kSocketBufferBytes = 64 << 20;

void check(bool ok, const char* what) {
  if (!ok) baseline::throw_errno(what);
}

struct Completions {
  uint64_t total = 0;
  uint64_t copied = 0;
};

// Reaps zerocopy notifications: each names a range of send calls.
void reap(int fd, Completions& c) {
  for (;;) {
    alignas(cmsghdr) char control[128];
    msghdr m{};
    m.msg_control = control;
    m.msg_controllen = sizeof(control);
    if (::recvmsg(fd, &m, MSG_ERRQUEUE | MSG_DONTWAIT) < 0) return;
    for (cmsghdr* cm = CMSG_FIRSTHDR(&m); cm != nullptr; cm = CMSG_NXTHDR(&m, cm)) {
      sock_extended_err err;
      std::memcpy(&err, CMSG_DATA(cm), sizeof(err));
      if (err.ee_origin != SO_EE_ORIGIN_ZEROCOPY) continue;
      const uint64_t n = uint64_t{err.ee_data} - err.ee_info + 1;
      c.total += n;
      if ((err.ee_code & SO_EE_CODE_ZEROCOPY_COPIED) != 0) c.copied += n;
    }
  }
}

// Sends for one second per round and mode; prints and records each.
int probe(baseline::Program& program, int rounds) {
  const int rx = ::socket(AF_INET, SOCK_DGRAM, 0);
  check(rx >= 0, "socket");
  (void)::setsockopt(rx, SOL_SOCKET, SO_RCVBUFFORCE, &kSocketBufferBytes, sizeof(int));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t addr_len = sizeof(addr);
  check(::bind(rx, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0, "bind");
  check(::getsockname(rx, reinterpret_cast<sockaddr*>(&addr), &addr_len) == 0, "getsockname");
  const int on = 1;
  check(::setsockopt(rx, SOL_UDP, UDP_GRO, &on, sizeof(on)) == 0, "UDP_GRO");
  std::vector<char> data(kBufferBytes, 1);

  for (int round = 0; round < rounds; round++) {
    for (const bool zerocopy : {false, true}) {
      const int tx = ::socket(AF_INET, SOCK_DGRAM, 0);
      check(tx >= 0, "socket");
      (void)::setsockopt(tx, SOL_SOCKET, SO_SNDBUFFORCE, &kSocketBufferBytes, sizeof(int));
      check(::connect(tx, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0, "connect");
      check(::setsockopt(tx, SOL_UDP, UDP_SEGMENT, &kSegmentBytes, sizeof(int)) == 0,
            "UDP_SEGMENT");
      if (zerocopy)
        check(::setsockopt(tx, SOL_SOCKET, SO_ZEROCOPY, &on, sizeof(on)) == 0, "SO_ZEROCOPY");
      std::atomic<bool> stop{false};
      std::atomic<uint64_t> received{0};
      std::thread receiver([&] {
        std::vector<char> buf(65536);
        uint64_t bytes = 0;
        while (!stop.load(std::memory_order_relaxed)) {
          const ssize_t r = ::recv(rx, buf.data(), buf.size(), MSG_DONTWAIT);
          if (r > 0) bytes += static_cast<uint64_t>(r);
        }
        received = bytes;
      });
      Completions completions;
      uint64_t sent = 0;
      size_t offset = 0;
      const auto start = std::chrono::steady_clock::now();
      std::chrono::duration<double> elapsed{};
      while ((elapsed = std::chrono::steady_clock::now() - start).count() < 1.0) {
        const ssize_t r = ::send(tx, &data[offset], kSendBytes, zerocopy ? MSG_ZEROCOPY : 0);
        if (r > 0) {
          sent += static_cast<uint64_t>(r);
          offset = (offset + kSendBytes) % (kBufferBytes - kSendBytes);
        }
        if (zerocopy) reap(tx, completions);
      }
      stop = true;
      receiver.join();
      ::close(tx);
      const double secs = elapsed.count();
      fmt::print("round {} {:12}: sent {:.2f} Gbit/s, received {:.2f} Gbit/s", round,
                 zerocopy ? "MSG_ZEROCOPY" : "copy", static_cast<double>(sent) * 8 / secs / 1e9,
                 static_cast<double>(received.load()) * 8 / secs / 1e9);
      if (zerocopy) {
        fmt::print("; {} completions, {} copied by the kernel anyway", completions.total,
                   completions.copied);
      }
      fmt::print("\n");
      program.result().results.push_back(
          {{"round", round},
           {"mode", zerocopy ? "MSG_ZEROCOPY" : "copy"},
           {"size", kSendBytes},
           {"duration_s", measure::round_to(secs, 6)},
           {"bytes", sent},
           {"gbps", measure::round_to(static_cast<double>(sent) * 8 / secs / 1e9, 4)},
           {"received_gbps",
            measure::round_to(static_cast<double>(received.load()) * 8 / secs / 1e9, 4)},
           {"zerocopy_completions", completions.total},
           {"zerocopy_copied", completions.copied}});
    }
  }
  ::close(rx);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  baseline::Program program("udp_zerocopy_probe", "raw_udp_zerocopy_probe",
                            "Does MSG_ZEROCOPY pay for librpc's large udp sends? Sends GSO "
                            "datagrams of 44 x 1472 B over 127.0.0.1 for one second per round, "
                            "with plain copies and with MSG_ZEROCOPY.",
                            argc, argv);
  int rounds = 3;
  program.cli()
      .add_option("ROUNDS", rounds, "rounds of both modes")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  program.add_output_options(program.cli());
  return program.run(argc, argv, [&] {
    program.describe("udp", "goodput",
                     fmt::format("one process over 127.0.0.1: blocking sender (UDP GSO, {} x {} "
                                 "B per send, from a {} MiB buffer), busy-polling UDP GRO "
                                 "receiver thread; not pinned",
                                 kSegmentsPerSend, kSegmentBytes, kBufferBytes >> 20),
                     {{"rounds", rounds}, {"send_bytes", kSendBytes}});
    const int status = program.measured(2, [&] { return probe(program, rounds); });
    program.check_trust();
    program.write_outputs();
    return status;
  });
}
