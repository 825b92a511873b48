// The udp transport's sends when the kernel refuses them: a full socket
// buffer (EAGAIN, ENOBUFS) or a signal (EINTR) is retried, up to
// UdpTransport::kMaxTxRetries more times, and then the burst is dropped (the
// engine's retransmission recovers it); any other error drops the datagram
// at once. Loopback never fills a UDP socket's send buffer, so this program
// interposes sendto and sendmmsg: its own definitions come before libc's (and
// a sanitizer's interceptors) for every call in the program, fail as many
// calls as a test asks, and hand the rest on to the next definition.
#include <dlfcn.h>
#include <sys/socket.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "transport/udp/udp_transport.h"
#include "udp_test_util.h"

namespace {

// What the next calls of one system call meet: `pass_first` go through,
// then `remaining` fail with `error`, sending nothing, and the calls after
// go through again. A sendmmsg that goes through sends at most
// `max_msgs` messages (0: all), as the kernel's does when the socket
// buffer fills part of the way through a batch.
struct Faults {
  int remaining = 0;
  int error = 0;
  int pass_first = 0;
  unsigned max_msgs = 0;
  int calls = 0;  // every call, failed or not
};
Faults sendto_faults;
Faults sendmmsg_faults;

template <typename Fn>
Fn next_definition(const char* name) {
  void* fn = dlsym(RTLD_NEXT, name);
  if (fn == nullptr) {
    std::fprintf(stderr, "test_udp_send_faults: no %s after this program's: %s\n", name, dlerror());
    std::abort();
  }
  return reinterpret_cast<Fn>(fn);
}

// Counts the call; true (errno set) if it is to fail.
bool inject(Faults& faults) {
  faults.calls++;
  if (faults.calls <= faults.pass_first || faults.remaining == 0) return false;
  faults.remaining--;
  errno = faults.error;
  return true;
}

}  // namespace

extern "C" ssize_t sendto(int fd, const void* buf, size_t len, int flags, const sockaddr* addr,
                          socklen_t addr_len) {
  using Fn = ssize_t (*)(int, const void*, size_t, int, const sockaddr*, socklen_t);
  static const Fn next = next_definition<Fn>("sendto");
  if (inject(sendto_faults)) return -1;
  return next(fd, buf, len, flags, addr, addr_len);
}

extern "C" int sendmmsg(int fd, mmsghdr* msgs, unsigned int vlen, int flags) {
  using Fn = int (*)(int, mmsghdr*, unsigned int, int);
  static const Fn next = next_definition<Fn>("sendmmsg");
  if (inject(sendmmsg_faults)) return -1;
  if (sendmmsg_faults.max_msgs != 0) vlen = std::min(vlen, sendmmsg_faults.max_msgs);
  return next(fd, msgs, vlen, flags);
}

using namespace rpc::test::udp;

namespace {

// The next `count` calls of `faults`'s system call fail with `error`.
void arm(Faults& faults, int count, int error) {
  faults = Faults{.remaining = count, .error = error};
}

// Whether `a` segments its bursts. Without GSO in the kernel the
// offload=true cases test the plain path again, and say so.
bool segments(const UdpTransport& a, bool offload) {
  if (offload && !a.gso_enabled()) {
    WARN("this kernel lacks UDP GSO: the segmented case runs the plain path");
  }
  return a.gso_enabled();
}

// Sends one header-only packet from a to b: tx_burst's one-datagram path
// (sendto).
void send_one(UdpTransport& a, const RoutingInfo& a_to_b, const OutPkt& pkt) {
  a.tx_burst(items_of({pkt}, a_to_b));
}

// Sends `next` as send_one does, with sendto no longer failing, and checks
// that it is the first packet b receives: what was sent before was dropped.
void check_next_arrives_first(UdpTransport& a, UdpTransport& b, const RoutingInfo& a_to_b,
                              const OutPkt& next) {
  arm(sendto_faults, 0, 0);
  send_one(a, a_to_b, next);
  const std::vector<RxPacket> got = receive(b, 1);
  REQUIRE(got.size() == 1);
  check_pkt(got[0], next);
}

}  // namespace

TEST_CASE("a one-datagram send that meets a full socket buffer goes out on a retry") {
  const int error = GENERATE(EAGAIN, ENOBUFS, EINTR);
  UdpTransport a(make_config(), "127.0.0.1");
  UdpTransport b(make_config(), "127.0.0.1");
  const RoutingInfo a_to_b = route_to(b, a);
  const OutPkt pkt = make_pkt(1, 0);

  arm(sendto_faults, 3, error);
  send_one(a, a_to_b, pkt);

  CHECK(sendto_faults.calls == 4);
  const std::vector<RxPacket> got = receive(b, 1);
  REQUIRE(got.size() == 1);
  check_pkt(got[0], pkt);
}

TEST_CASE("a one-datagram send is dropped after kMaxTxRetries retries, and the next goes out") {
  UdpTransport a(make_config(), "127.0.0.1");
  UdpTransport b(make_config(), "127.0.0.1");
  const RoutingInfo a_to_b = route_to(b, a);
  const OutPkt dropped = make_pkt(1, 0);
  const OutPkt next = make_pkt(2, 0);

  // A buffer that stays full: the first call and kMaxTxRetries more, no more.
  arm(sendto_faults, 1000, EAGAIN);
  send_one(a, a_to_b, dropped);
  CHECK(sendto_faults.calls == 1 + UdpTransport::kMaxTxRetries);

  // Once it drains, the next packet is the first to arrive, on one call.
  check_next_arrives_first(a, b, a_to_b, next);
  CHECK(sendto_faults.calls == 1);
}

TEST_CASE("a one-datagram send that fails for another reason is not retried") {
  UdpTransport a(make_config(), "127.0.0.1");
  UdpTransport b(make_config(), "127.0.0.1");
  const RoutingInfo a_to_b = route_to(b, a);
  const OutPkt dropped = make_pkt(1, 0);
  const OutPkt next = make_pkt(2, 0);

  arm(sendto_faults, 1, EPERM);  // e.g. a firewall rule
  send_one(a, a_to_b, dropped);
  CHECK(sendto_faults.calls == 1);

  check_next_arrives_first(a, b, a_to_b, next);
}

TEST_CASE("a burst that meets a full socket buffer goes out whole on a retry") {
  const bool offload = GENERATE(false, true);
  UdpTransport a(offload_config(offload), "127.0.0.1");
  UdpTransport b(offload_config(offload), "127.0.0.1");
  const bool gso = segments(a, offload);
  const RoutingInfo a_to_b = route_to(b, a);
  // Packets of a multi-packet message: one sendmmsg of plain datagrams,
  // or of one segmented message.
  const std::vector<OutPkt> pkts = message_pkts(a, 0, 30);

  arm(sendmmsg_faults, 3, GENERATE(EAGAIN, ENOBUFS, EINTR));
  a.tx_burst(items_of(pkts, a_to_b));

  CHECK(sendmmsg_faults.calls == 4);
  const std::vector<std::vector<uint8_t>> got = receive_copies(b, pkts.size());
  REQUIRE(got.size() == pkts.size());
  for (size_t i = 0; i < pkts.size(); i++) check_copy(got[i], pkts[i]);
  // A full buffer says nothing about segmentation: GSO stays on, and the
  // retry was a segmented send.
  CHECK(a.gso_enabled() == gso);
  CHECK((a.gso_sends() > 0) == gso);
}

TEST_CASE("a burst cut short by a full socket buffer goes on where it stopped") {
  UdpTransport a(offload_config(false), "127.0.0.1");
  UdpTransport b(offload_config(false), "127.0.0.1");
  const RoutingInfo a_to_b = route_to(b, a);
  const std::vector<OutPkt> pkts = message_pkts(a, 0, UdpTransport::kMaxBatch + 8);

  // The first sendmmsg takes 10 datagrams of the 32 it is given, the next
  // three none (EAGAIN), and each call after at most 10.
  sendmmsg_faults = Faults{.remaining = 3, .error = EAGAIN, .pass_first = 1, .max_msgs = 10};
  a.tx_burst(items_of(pkts, a_to_b));

  // 32 in 4 calls that sent (10, 10, 10, 2) and 3 that failed, then 8 in one.
  CHECK(sendmmsg_faults.calls == 8);
  const std::vector<std::vector<uint8_t>> got = receive_copies(b, pkts.size());
  REQUIRE(got.size() == pkts.size());
  for (size_t i = 0; i < pkts.size(); i++) check_copy(got[i], pkts[i]);
}

TEST_CASE("a datagram of a burst that fails for another reason is dropped alone") {
  UdpTransport a(offload_config(false), "127.0.0.1");
  UdpTransport b(offload_config(false), "127.0.0.1");
  const RoutingInfo a_to_b = route_to(b, a);
  const std::vector<OutPkt> pkts = message_pkts(a, 0, UdpTransport::kMaxBatch + 8);

  // sendmmsg reports an error only when the first datagram it was given
  // failed: that one is dropped, and the rest of the burst goes on.
  arm(sendmmsg_faults, 1, EPERM);
  a.tx_burst(items_of(pkts, a_to_b));

  CHECK(sendmmsg_faults.calls == 3);  // failed, the other 31, the last 8
  const std::vector<std::vector<uint8_t>> got = receive_copies(b, pkts.size() - 1);
  REQUIRE(got.size() == pkts.size() - 1);
  for (size_t i = 0; i < got.size(); i++) check_copy(got[i], pkts[i + 1]);
}

TEST_CASE("a burst is dropped whole after kMaxTxRetries retries, and the next goes out") {
  const bool offload = GENERATE(false, true);
  UdpTransport a(offload_config(offload), "127.0.0.1");
  UdpTransport b(offload_config(offload), "127.0.0.1");
  const bool gso = segments(a, offload);
  const RoutingInfo a_to_b = route_to(b, a);
  // Plain, more datagrams than one sendmmsg takes: the whole burst is
  // dropped, not only its first batch. Segmented, one message.
  const std::vector<OutPkt> dropped = message_pkts(a, 0, UdpTransport::kMaxBatch + 8);
  const std::vector<OutPkt> next = message_pkts(a, 100, 10);

  arm(sendmmsg_faults, 1000, EAGAIN);
  a.tx_burst(items_of(dropped, a_to_b));
  CHECK(sendmmsg_faults.calls == 1 + UdpTransport::kMaxTxRetries);

  arm(sendmmsg_faults, 0, 0);
  a.tx_burst(items_of(next, a_to_b));
  const std::vector<std::vector<uint8_t>> got = receive_copies(b, next.size());
  REQUIRE(got.size() == next.size());
  for (size_t i = 0; i < next.size(); i++) check_copy(got[i], next[i]);
  CHECK(a.gso_enabled() == gso);
}
