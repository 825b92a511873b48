// netns_link: a userspace stand-in for `tc qdisc ... netem` on kernels built
// without sch_netem. It runs in a middle network namespace that holds one
// end of two veth pairs (one to each host) and forwards every Ethernet frame
// between them with AF_PACKET sockets, applying netem's fault model to each
// direction independently (as netem on both veth ends would):
//
//   netns_link --a IFACE --b IFACE [--seed N] [--] NETEM-ARGS...
//
// NETEM-ARGS is the subset of tc-netem(8) the tests use, with netem's
// semantics: `loss P% [CORR%]`, `delay T [JITTER [CORR%]]` (uniform jitter;
// packets leave in time-to-send order, so jitter reorders),
// `reorder P% [CORR%]` (that share of packets skips the delay, gap 1),
// `duplicate P% [CORR%]` (the copy goes through the model again, without
// duplication), `corrupt P% [CORR%]` (one random bit of the frame flipped
// after the UDP checksum was made valid, so receivers drop most of them).
// Times take us, ms or s suffixes.
//
// Frames whose UDP checksum the sending kernel left to offload
// (CHECKSUM_PARTIAL on veth) get it computed here, since the receiving kernel
// checks it. Prints "netns_link ready" once both sockets are bound; on
// SIGTERM/SIGINT prints one "link_stats ..." line and exits 0.
#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <CLI/CLI.hpp>

#include <array>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <queue>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "cli.h"  // tools/measure: exit statuses and integer conventions

#ifndef PACKET_IGNORE_OUTGOING
#define PACKET_IGNORE_OUTGOING 23
#endif

namespace {

std::atomic<bool> g_stop{false};
void on_stop(int) { g_stop.store(true); }

uint64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// ------------------------------------------------------------- the model

// netem's correlated random numbers (get_crandom in sch_netem.c).
struct Crandom {
  uint32_t rho = 0;
  uint32_t last = 0;
};

struct Model {
  uint32_t loss = 0, duplicate = 0, corrupt = 0, reorder = 0;  // probability * 2^32
  Crandom loss_cor, dup_cor, corrupt_cor, reorder_cor, delay_cor;
  uint64_t latency_ns = 0, jitter_ns = 0;
  uint32_t gap = 0;
};

struct DirStats {
  uint64_t rx = 0, tx = 0, lost = 0, duplicated = 0, corrupted = 0, reordered = 0, tx_errors = 0,
           csum_fixed = 0;
};

// One direction: its own model state (netem on that veth end).
struct Direction {
  Model m;
  uint32_t counter = 0;
  int out_fd = -1;
  DirStats st;
};

std::mt19937 g_rng;

uint32_t get_crandom(Crandom& s) {
  const auto value = static_cast<uint32_t>(g_rng());
  if (s.rho == 0) return value;
  const uint64_t rho = uint64_t{s.rho} + 1;
  const auto answer = static_cast<uint32_t>(
      (uint64_t{value} * ((1ull << 32) - rho) + uint64_t{s.last} * rho) >> 32);
  s.last = answer;
  return answer;
}

uint64_t tabledist(uint64_t mu, uint64_t sigma, Crandom& s) {
  if (sigma == 0) return mu;
  const uint32_t rnd = get_crandom(s);
  const uint64_t v = rnd % (2 * sigma) + mu;
  return v > sigma ? v - sigma : 0;
}

// ------------------------------------------------------------- frames

struct Pending {
  uint64_t time_ns;
  uint64_t seq;  // FIFO among equal times
  Direction* dir;
  std::vector<uint8_t> frame;
  bool operator>(const Pending& o) const {
    return time_ns != o.time_ns ? time_ns > o.time_ns : seq > o.seq;
  }
};

std::priority_queue<Pending, std::vector<Pending>, std::greater<>> g_queue;
uint64_t g_seq = 0;

uint32_t sum16(const uint8_t* p, size_t n, uint32_t acc) {
  for (size_t i = 0; i + 1 < n; i += 2) acc += (uint32_t{p[i]} << 8) | p[i + 1];
  if (n & 1) acc += uint32_t{p[n - 1]} << 8;
  return acc;
}

// Makes the UDP checksum of an unfragmented IPv4/UDP frame valid. Returns
// true when it changed.
bool fix_udp_checksum(std::vector<uint8_t>& f) {
  constexpr size_t kEth = 14;
  if (f.size() < kEth + 20 + 8) return false;
  if (f[12] != 0x08 || f[13] != 0x00) return false;  // IPv4 only
  uint8_t* ip = f.data() + kEth;
  if ((ip[0] >> 4) != 4) return false;
  const size_t ihl = size_t{ip[0] & 0x0fu} * 4;
  const size_t tot_len = (size_t{ip[2]} << 8) | ip[3];
  if (ip[9] != IPPROTO_UDP || ihl < 20 || tot_len < ihl + 8 || kEth + tot_len > f.size()) {
    return false;
  }
  const uint16_t frag = static_cast<uint16_t>((ip[6] << 8) | ip[7]);
  if ((frag & 0x3fff) != 0) return false;  // a fragment: no whole datagram here
  uint8_t* udp = ip + ihl;
  const size_t udp_len = tot_len - ihl;
  const uint16_t old = static_cast<uint16_t>((udp[6] << 8) | udp[7]);
  if (old == 0) return false;  // sent without a checksum
  udp[6] = udp[7] = 0;
  uint32_t acc = sum16(ip + 12, 8, 0);  // source and destination addresses
  acc += IPPROTO_UDP;
  acc += static_cast<uint32_t>(udp_len);
  acc = sum16(udp, udp_len, acc);
  while (acc >> 16) acc = (acc & 0xffff) + (acc >> 16);
  uint16_t c = static_cast<uint16_t>(~acc);
  if (c == 0) c = 0xffff;
  udp[6] = static_cast<uint8_t>(c >> 8);
  udp[7] = static_cast<uint8_t>(c & 0xff);
  return c != old;
}

void transmit(Direction& d, const std::vector<uint8_t>& frame) {
  const ssize_t r = ::send(d.out_fd, frame.data(), frame.size(), MSG_DONTWAIT);
  if (r < 0) {
    d.st.tx_errors++;  // e.g. the far link is down: the frame is lost
  } else {
    d.st.tx++;
  }
}

// netem_enqueue: duplicate, loss, corrupt, then delay or reorder.
void enqueue(Direction& d, std::vector<uint8_t> frame, bool may_duplicate, uint64_t now) {
  int count = 1;
  if (may_duplicate && d.m.duplicate != 0 && d.m.duplicate >= get_crandom(d.m.dup_cor)) count++;
  if (d.m.loss != 0 && d.m.loss >= get_crandom(d.m.loss_cor)) count--;
  if (count == 0) {
    d.st.lost++;
    return;
  }
  if (count > 1) {
    d.st.duplicated++;
    enqueue(d, frame, false, now);  // the copy: its own loss, corruption and delay
  }
  if (d.m.corrupt != 0 && d.m.corrupt >= get_crandom(d.m.corrupt_cor) && !frame.empty()) {
    d.st.corrupted++;
    const size_t byte = g_rng() % frame.size();
    frame[byte] ^= static_cast<uint8_t>(1u << (g_rng() % 8));
  }
  if (d.m.gap == 0 || d.counter < d.m.gap - 1 || d.m.reorder < get_crandom(d.m.reorder_cor)) {
    const uint64_t delay = tabledist(d.m.latency_ns, d.m.jitter_ns, d.m.delay_cor);
    d.counter++;
    if (delay == 0 && g_queue.empty()) {
      transmit(d, frame);
      return;
    }
    g_queue.push(Pending{now + delay, g_seq++, &d, std::move(frame)});
    return;
  }
  // Reordered: jumps the queue.
  d.counter = 0;
  d.st.reordered++;
  transmit(d, frame);
}

// ------------------------------------------------------------- parsing

bool parse_percent(std::string_view s, uint32_t& out) {
  if (!s.ends_with("%")) return false;
  s.remove_suffix(1);
  double v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || v < 0 || v > 100) return false;
  out = static_cast<uint32_t>(std::min(4294967295.0, std::floor(v / 100.0 * 4294967295.0)));
  return true;
}

bool parse_time(std::string_view s, uint64_t& ns) {
  double mult = 1e3;  // netem's default unit is microseconds
  if (s.ends_with("us")) {
    s.remove_suffix(2);
  } else if (s.ends_with("ms")) {
    s.remove_suffix(2);
    mult = 1e6;
  } else if (s.ends_with("s")) {
    s.remove_suffix(1);
    mult = 1e9;
  }
  double v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || v < 0) return false;
  ns = static_cast<uint64_t>(v * mult);
  return true;
}

bool is_percent(const std::vector<std::string>& a, size_t i) {
  uint32_t dummy = 0;
  return i < a.size() && parse_percent(a[i], dummy);
}

bool parse_netem(const std::vector<std::string>& a, Model& m) {
  for (size_t i = 0; i < a.size();) {
    const std::string& k = a[i++];
    uint32_t* prob = nullptr;
    Crandom* cor = nullptr;
    if (k == "loss") {
      if (i < a.size() && a[i] == "random") i++;
      prob = &m.loss;
      cor = &m.loss_cor;
    } else if (k == "duplicate") {
      prob = &m.duplicate;
      cor = &m.dup_cor;
    } else if (k == "corrupt") {
      prob = &m.corrupt;
      cor = &m.corrupt_cor;
    } else if (k == "reorder") {
      prob = &m.reorder;
      cor = &m.reorder_cor;
      if (m.gap == 0) m.gap = 1;
    } else if (k == "delay") {
      if (i >= a.size() || !parse_time(a[i++], m.latency_ns)) return false;
      if (i < a.size() && !is_percent(a, i) && parse_time(a[i], m.jitter_ns)) {
        i++;
        if (is_percent(a, i)) parse_percent(a[i++], m.delay_cor.rho);
      }
      continue;
    } else {
      std::fprintf(stderr, "netns_link: unsupported netem argument '%s'\n", k.c_str());
      return false;
    }
    if (i >= a.size() || !parse_percent(a[i++], *prob)) return false;
    if (is_percent(a, i)) parse_percent(a[i++], cor->rho);
  }
  return true;
}

int open_packet_socket(const std::string& ifname) {
  const unsigned idx = if_nametoindex(ifname.c_str());
  if (idx == 0) {
    std::fprintf(stderr, "netns_link: no interface %s\n", ifname.c_str());
    return -1;
  }
  const int fd = ::socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, htons(ETH_P_ALL));
  if (fd < 0) {
    std::perror("netns_link: socket(AF_PACKET)");
    return -1;
  }
  const int one = 1;
  (void)::setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof(one));
  const int buf = 8 << 20;
  if (::setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &buf, sizeof(buf)) != 0) {
    (void)::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
  }
  if (::setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &buf, sizeof(buf)) != 0) {
    (void)::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
  }
  sockaddr_ll sll{};
  sll.sll_family = AF_PACKET;
  sll.sll_protocol = htons(ETH_P_ALL);
  sll.sll_ifindex = static_cast<int>(idx);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&sll), sizeof(sll)) != 0) {
    std::perror("netns_link: bind");
    ::close(fd);
    return -1;
  }
  return fd;
}

// Reads every frame waiting on fd and runs it through the direction's model.
void drain(int fd, Direction& d) {
  static std::array<uint8_t, 65536> buf;
  for (;;) {
    sockaddr_ll from{};
    socklen_t len = sizeof(from);
    const ssize_t n = ::recvfrom(fd, buf.data(), buf.size(), MSG_DONTWAIT,
                                 reinterpret_cast<sockaddr*>(&from), &len);
    if (n < 0) return;
    if (from.sll_pkttype == PACKET_OUTGOING) continue;  // our own transmissions
    d.st.rx++;
    std::vector<uint8_t> frame(buf.begin(), buf.begin() + n);
    if (fix_udp_checksum(frame)) d.st.csum_fixed++;
    enqueue(d, std::move(frame), true, now_ns());
  }
}

void print_stats(const char* name, const DirStats& s) {
  std::printf(
      " %s: rx=%llu tx=%llu lost=%llu duplicated=%llu corrupted=%llu reordered=%llu "
      "tx_errors=%llu",
      name, static_cast<unsigned long long>(s.rx), static_cast<unsigned long long>(s.tx),
      static_cast<unsigned long long>(s.lost), static_cast<unsigned long long>(s.duplicated),
      static_cast<unsigned long long>(s.corrupted), static_cast<unsigned long long>(s.reordered),
      static_cast<unsigned long long>(s.tx_errors));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App cli(
      "A userspace stand-in for tc netem: forwards Ethernet frames between two interfaces, "
      "applying netem's fault model to each direction.",
      "netns_link");
  std::string if_a, if_b;
  uint64_t seed = std::random_device{}();
  std::vector<std::string> netem;
  cli.add_option("--a", if_a, "one interface")->required();
  cli.add_option("--b", if_b, "the other interface")->required();
  cli.add_option("--seed", seed, "random seed (default: random)");
  cli.add_option("NETEM", netem,
                 "tc-netem arguments: [loss P% [C%]] [delay T [J [C%]]] [reorder P% [C%]] "
                 "[duplicate P% [C%]] [corrupt P% [C%]]; times take us, ms or s");
  if (auto status = measure::parse_command_line(cli, argc, argv)) return *status;
  Model model;
  if (!parse_netem(netem, model)) {
    std::fprintf(stderr,
                 "netns_link: bad netem arguments\nRun with --help for more information.\n");
    return 2;
  }
  g_rng.seed(static_cast<uint32_t>(seed));
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  struct sigaction sa {};
  sa.sa_handler = on_stop;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  // Wake up on time for each delayed frame, not 50 us late.
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);

  const int fd_a = open_packet_socket(if_a);
  const int fd_b = open_packet_socket(if_b);
  if (fd_a < 0 || fd_b < 0) return 1;
  Direction a_to_b{model, 0, fd_b, {}};
  Direction b_to_a{model, 0, fd_a, {}};
  std::printf("netns_link ready (%s <-> %s, seed %llu)\n", if_a.c_str(), if_b.c_str(),
              static_cast<unsigned long long>(seed));

  std::array<pollfd, 2> fds{pollfd{fd_a, POLLIN, 0}, pollfd{fd_b, POLLIN, 0}};
  while (!g_stop.load()) {
    const uint64_t now = now_ns();
    while (!g_queue.empty() && g_queue.top().time_ns <= now) {
      const Pending& p = g_queue.top();
      transmit(*p.dir, p.frame);
      g_queue.pop();
    }
    timespec ts{};
    timespec* timeout = nullptr;
    if (!g_queue.empty()) {
      const uint64_t wait = g_queue.top().time_ns - now;
      ts.tv_sec = static_cast<time_t>(wait / 1'000'000'000ull);
      ts.tv_nsec = static_cast<long>(wait % 1'000'000'000ull);
      timeout = &ts;
    } else {
      ts.tv_sec = 0;
      ts.tv_nsec = 200'000'000;  // to notice a stop signal
      timeout = &ts;
    }
    fds[0].revents = fds[1].revents = 0;
    const int r = ::ppoll(fds.data(), fds.size(), timeout, nullptr);
    if (r < 0 && errno != EINTR) {
      std::perror("netns_link: ppoll");
      return 1;
    }
    if (r <= 0) continue;
    if (fds[0].revents & POLLIN) drain(fd_a, a_to_b);
    if (fds[1].revents & POLLIN) drain(fd_b, b_to_a);
  }
  std::printf("link_stats");
  print_stats("a_to_b", a_to_b.st);
  print_stats("b_to_a", b_to_a.st);
  std::printf("\n");
  ::close(fd_a);
  ::close(fd_b);
  return 0;
}
