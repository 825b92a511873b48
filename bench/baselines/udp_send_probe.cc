// How should librpc's udp transport hand a large send to the kernel? Sends
// GSO datagrams of 44 x 1472 B (the largest run the transport packs into
// one send) from a 16 MiB buffer to a GRO receiver thread on 127.0.0.1 for
// one second per mode and round, and prints the goodput of each mode:
//   copy          one iovec per send (what a raw stream does);
//   MSG_ZEROCOPY  the same with MSG_ZEROCOPY, and how many completions the
//                 kernel reported as copied anyway (SO_EE_CODE_ZEROCOPY_COPIED;
//                 on loopback every one: the notifications are pure overhead);
//   iovec/packet  a 16-byte header iovec and a 1456-byte data iovec per
//                 datagram, the data walking the buffer (a MsgBuffer's layout,
//                 as the transport sent before it gathered);
//   gathered      the same header and data copied into one buffer first, then
//                 one iovec per send (what the transport does now).
// docs/transports.md has the numbers.
//
//   udp_send_probe [ROUNDS] [--json FILE] [--csv FILE]
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
constexpr size_t kHeaderBytes = 16;  // librpc's packet header (kPktHeaderBytes)
constexpr size_t kDataBytes = kSegmentBytes - kHeaderBytes;
constexpr size_t kHeaderStride = 64;  // the headers lie apart, as a MsgBuffer's do

enum class Mode { kCopy, kZerocopy, kIovecPerPacket, kGathered };
constexpr Mode kModes[] = {Mode::kCopy, Mode::kZerocopy, Mode::kIovecPerPacket, Mode::kGathered};

const char* mode_name(Mode mode) {
  switch (mode) {
    case Mode::kCopy:
      return "copy";
    case Mode::kZerocopy:
      return "MSG_ZEROCOPY";
    case Mode::kIovecPerPacket:
      return "iovec/packet";
    case Mode::kGathered:
      return "gathered";
  }
  return "?";
}

// One send of kSegmentsPerSend datagrams whose data starts at data[offset]:
// as one slice, or as header and data iovecs per datagram, or gathered.
class SendLayout {
 public:
  explicit SendLayout(const std::vector<char>& data)
      : data_(data), headers_(kSegmentsPerSend * kHeaderStride, 2), gathered_(kSendBytes) {}
  ssize_t send(int fd, Mode mode, size_t offset) {
    msghdr m{};
    size_t n = 0;
    const char* src = &data_[offset];
    switch (mode) {
      case Mode::kCopy:
      case Mode::kZerocopy:
        iovs_[n++] = {const_cast<char*>(src), kSendBytes};
        break;
      case Mode::kIovecPerPacket:
        for (int k = 0; k < kSegmentsPerSend; k++) {
          iovs_[n++] = {&headers_[k * kHeaderStride], kHeaderBytes};
          iovs_[n++] = {const_cast<char*>(src + k * kDataBytes), kDataBytes};
        }
        break;
      case Mode::kGathered:
        for (int k = 0; k < kSegmentsPerSend; k++) {
          char* dst = &gathered_[k * kSegmentBytes];
          std::memcpy(dst, &headers_[k * kHeaderStride], kHeaderBytes);
          std::memcpy(dst + kHeaderBytes, src + k * kDataBytes, kDataBytes);
        }
        iovs_[n++] = {gathered_.data(), kSendBytes};
        break;
    }
    m.msg_iov = iovs_;
    m.msg_iovlen = n;
    return ::sendmsg(fd, &m, mode == Mode::kZerocopy ? MSG_ZEROCOPY : 0);
  }

 private:
  const std::vector<char>& data_;
  std::vector<char> headers_;  // one per datagram, kHeaderStride apart
  std::vector<char> gathered_;
  iovec iovs_[2 * kSegmentsPerSend];
};

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
  SendLayout layout(data);

  for (int round = 0; round < rounds; round++) {
    for (const Mode mode : kModes) {
      const bool zerocopy = mode == Mode::kZerocopy;
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
        const ssize_t r = layout.send(tx, mode, offset);
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
                 mode_name(mode), static_cast<double>(sent) * 8 / secs / 1e9,
                 static_cast<double>(received.load()) * 8 / secs / 1e9);
      if (zerocopy) {
        fmt::print("; {} completions, {} copied by the kernel anyway", completions.total,
                   completions.copied);
      }
      fmt::print("\n");
      program.result().results.push_back(
          {{"round", round},
           {"mode", mode_name(mode)},
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
  baseline::Program program("udp_send_probe", "raw_udp_send_probe",
                            "How should librpc's udp transport hand a large send to the kernel? "
                            "Sends GSO datagrams of 44 x 1472 B over 127.0.0.1 for one second "
                            "per round and mode: one iovec per send (copy, MSG_ZEROCOPY), a "
                            "header and a data iovec per datagram, and both gathered first.",
                            argc, argv);
  int rounds = 3;
  program.cli()
      .add_option("ROUNDS", rounds, "rounds of every mode")
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
