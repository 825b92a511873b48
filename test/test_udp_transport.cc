// Tests of the udp transport over loopback: batching, the RX ring, routing
// info and configuration checks.
#include <arpa/inet.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <vector>

#include "librpc/msg_buffer.h"
#include "transport/udp/udp_transport.h"
#include "udp_test_util.h"

using namespace rpc::test::udp;

TEST_CASE("udp transport delivers a header and data slice as one datagram") {
  UdpTransport a(make_config(), "127.0.0.1");
  UdpTransport b(make_config(), "127.0.0.1");
  const RoutingInfo a_to_b = route_to(b, a);
  const RoutingInfo b_to_a = route_to(a, b);

  // Given more packets than one sendmmsg batch, of varying sizes.
  constexpr uint32_t kNum = 40;
  static_assert(kNum > UdpTransport::kMaxBatch);
  std::vector<OutPkt> pkts;
  for (uint32_t i = 0; i < kNum; i++) pkts.push_back(make_pkt(i, 1 + (i * 37) % 1456));
  a.tx_burst(items_of(pkts, a_to_b));

  // Expect all of them in order, byte for byte, tagged with a's src_key
  // (read as the engine does: each burst returned before the next).
  std::vector<RxPacket> got;
  std::array<RxPacket, 16> burst;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (got.size() < kNum && std::chrono::steady_clock::now() < deadline) {
    const size_t n = b.rx_burst(burst);
    for (size_t i = 0; i < n; i++) {
      REQUIRE(got.size() < kNum);
      check_pkt(burst[i], pkts[got.size()]);
      CHECK(burst[i].src_key == b.src_key_of(b_to_a));
      got.push_back(burst[i]);
    }
    b.post_recvs(n);
  }
  CHECK(got.size() == kNum);
}

TEST_CASE("udp transport sends header-only datagrams when the data slice is empty") {
  UdpTransport a(make_config(), "127.0.0.1");
  UdpTransport b(make_config(), "127.0.0.1");
  const RoutingInfo a_to_b = route_to(b, a);

  std::vector<OutPkt> pkts{make_pkt(1, 0), make_pkt(2, 5), make_pkt(3, 0)};
  a.tx_burst(items_of(pkts, a_to_b));

  const std::vector<RxPacket> got = receive(b, pkts.size());
  REQUIRE(got.size() == pkts.size());
  for (size_t i = 0; i < pkts.size(); i++) check_pkt(got[i], pkts[i]);
  CHECK(got[0].len == kPktHeaderBytes);
  b.post_recvs(got.size());
}

TEST_CASE("udp transport sends full-size datagrams of a jumbo mtu") {
  UdpTransport a(make_config(9000), "127.0.0.1");
  UdpTransport b(make_config(9000), "127.0.0.1");
  const RoutingInfo a_to_b = route_to(b, a);

  std::vector<OutPkt> pkts{make_pkt(1, b.caps().max_data_per_pkt), make_pkt(2, 1)};
  a.tx_burst(items_of(pkts, a_to_b));

  const std::vector<RxPacket> got = receive(b, pkts.size());
  REQUIRE(got.size() == pkts.size());
  for (size_t i = 0; i < pkts.size(); i++) check_pkt(got[i], pkts[i]);
  b.post_recvs(got.size());
}

TEST_CASE("udp transport refills its RX ring only as buffers are posted back") {
  constexpr size_t kRing = 64;
  UdpTransport a(make_config(), "127.0.0.1");
  // Without GRO: merged datagrams are not read into the ring (see "udp
  // offloads" below).
  rpc::RpcConfig plain = make_config(1500, kRing);
  plain.udp_offload = false;
  UdpTransport b(plain, "127.0.0.1");
  const RoutingInfo a_to_b = route_to(b, a);

  // Given rounds of 48 packets: the ring wraps in the second round and
  // would overflow by the third if buffers were not reused.
  constexpr uint32_t kPerRound = 48;
  uint32_t next_id = 0;
  for (int round = 0; round < 4; round++) {
    std::vector<OutPkt> pkts;
    for (uint32_t i = 0; i < kPerRound; i++) pkts.push_back(make_pkt(next_id++, 100));
    a.tx_burst(items_of(pkts, a_to_b));

    const std::vector<RxPacket> got = receive(b, kPerRound);
    REQUIRE(got.size() == kPerRound);
    for (uint32_t i = 0; i < kPerRound; i++) check_pkt(got[i], pkts[i]);
    b.post_recvs(kPerRound);
  }
}

TEST_CASE("udp transport holds packets in the kernel while its RX ring is full") {
  constexpr size_t kRing = 16;
  UdpTransport a(make_config(), "127.0.0.1");
  UdpTransport b(make_config(1500, kRing), "127.0.0.1");
  const RoutingInfo a_to_b = route_to(b, a);

  std::vector<OutPkt> pkts;
  for (uint32_t i = 0; i < kRing + 4; i++) pkts.push_back(make_pkt(i, 10));
  a.tx_burst(items_of(pkts, a_to_b));

  // Given a full ring, expect no more packets handed out.
  const std::vector<RxPacket> first = receive(b, kRing);
  REQUIRE(first.size() == kRing);
  std::array<RxPacket, 8> burst;
  CHECK(b.rx_burst(burst) == 0);

  // Expect the oldest buffers, once returned, to take the waiting packets.
  b.post_recvs(4);
  const std::vector<RxPacket> rest = receive(b, 4);
  REQUIRE(rest.size() == 4);
  for (size_t i = 0; i < 4; i++) {
    check_pkt(rest[i], pkts[kRing + i]);
    CHECK(rest[i].buf == first[i].buf);
  }
  // The 12 buffers still held were not overwritten.
  for (size_t i = 4; i < kRing; i++) check_pkt(first[i], pkts[i]);
  b.post_recvs(kRing);
}

TEST_CASE("udp transport drops datagrams larger than its packet size") {
  UdpTransport big(make_config(9000), "127.0.0.1");
  UdpTransport b(make_config(1500), "127.0.0.1");
  const RoutingInfo to_b = route_to(b, big);

  // Given an oversized datagram between two good ones in one batch.
  std::vector<OutPkt> pkts{make_pkt(1, 10), make_pkt(2, 3000), make_pkt(3, 20)};
  big.tx_burst(items_of(pkts, to_b));

  // Expect only the good ones, whole.
  const std::vector<RxPacket> got = receive(b, 2);
  REQUIRE(got.size() == 2);
  check_pkt(got[0], pkts[0]);
  check_pkt(got[1], pkts[2]);
  std::array<RxPacket, 4> burst;
  CHECK(b.rx_burst(burst) == 0);
  b.post_recvs(2);
  // and the drop counted by its reason
  CHECK(b.rx_drops.oversized == 1);
}

TEST_CASE("udp transport drops an oversized datagram that arrives while it is idle") {
  UdpTransport big(make_config(9000), "127.0.0.1");
  UdpTransport b(make_config(1500), "127.0.0.1");
  const RoutingInfo to_b = route_to(b, big);
  // Given b polled an empty socket (it then waits with recvfrom, one
  // datagram at a time) and the next datagram is oversized
  std::array<RxPacket, 4> burst;
  REQUIRE(b.rx_burst(burst) == 0);
  std::vector<OutPkt> first{make_pkt(1, 3000)};
  big.tx_burst(items_of(first, to_b));
  // Expect it dropped, and the good one after it delivered whole
  std::vector<OutPkt> second{make_pkt(2, 30)};
  big.tx_burst(items_of(second, to_b));
  const std::vector<RxPacket> got = receive(b, 1);
  REQUIRE(got.size() == 1);
  check_pkt(got[0], second[0]);
  b.post_recvs(1);
  CHECK(b.rx_drops.oversized == 1);
}

TEST_CASE("udp transport caps follow the mtu") {
  SECTION("ethernet mtu") {
    UdpTransport t(make_config(1500, 64), "127.0.0.1");
    CHECK(t.caps().max_pkt_bytes == 1472);
    CHECK(t.caps().max_data_per_pkt == 1456);
    CHECK(t.caps().rx_ring_size == 64);
    CHECK(t.caps().max_inline_bytes == 0);
    CHECK_FALSE(t.caps().bulk);
  }
  SECTION("jumbo mtu") {
    UdpTransport t(make_config(9000, 64), "127.0.0.1");
    CHECK(t.caps().max_pkt_bytes == 8972);
    CHECK(t.caps().max_data_per_pkt == 8956);
  }
  SECTION("largest mtu gives the largest IPv4 UDP payload") {
    UdpTransport t(make_config(65535, 4), "127.0.0.1");
    CHECK(t.caps().max_pkt_bytes == 65507);
  }
  CHECK(std::string(UdpTransport(make_config(), "127.0.0.1").name()) == "udp");
}

TEST_CASE("udp transport rejects a bad address or configuration") {
  CHECK_THROWS_AS(UdpTransport(make_config(), "not-an-ip"), rpc::Error);
  CHECK_THROWS_AS(UdpTransport(make_config(), "::1"), rpc::Error);
  // Not an address of this host: bind fails with EADDRNOTAVAIL.
  CHECK_THROWS_AS(UdpTransport(make_config(), "192.0.2.1"), rpc::Error);
  CHECK_THROWS_AS(UdpTransport(make_config(28 + 16 + 63), "127.0.0.1"), rpc::Error);
  CHECK_NOTHROW(UdpTransport(make_config(28 + 16 + 64), "127.0.0.1"));
  CHECK_THROWS_AS(UdpTransport(make_config(65536), "127.0.0.1"), rpc::Error);
  CHECK_THROWS_AS(UdpTransport(make_config(1500, 0), "127.0.0.1"), rpc::Error);
}

TEST_CASE("udp transport routing info names the bound address and port") {
  UdpTransport t(make_config(), "127.0.0.1");
  CHECK(t.local_port() != 0);

  RoutingInfo info;
  info.bytes.fill(0xff);
  t.fill_local_routing_info(info);
  UdpRoutingInfo udp;
  std::memcpy(&udp, info.bytes.data(), sizeof(udp));
  CHECK(udp.ipv4_be == htonl(INADDR_LOOPBACK));
  CHECK(ntohs(udp.port_be) == t.local_port());
  CHECK(udp.magic == rpc::detail::kUdpRoutingMagic);
  for (size_t i = sizeof(udp); i < info.bytes.size(); i++) CHECK(info.bytes[i] == 0);

  // Resolved in place into the sockaddr the TX path sends to; the source
  // key of its packets is read back from that form.
  RoutingInfo resolved = info;
  REQUIRE(t.resolve_remote_routing_info(resolved));
  sockaddr_in dst;
  std::memcpy(&dst, resolved.bytes.data(), sizeof(dst));
  CHECK(dst.sin_family == AF_INET);
  CHECK(dst.sin_addr.s_addr == htonl(INADDR_LOOPBACK));
  CHECK(ntohs(dst.sin_port) == t.local_port());
  // The source key tells peers apart by address and by port.
  const auto key_of = [&](uint32_t ipv4, uint16_t port) {
    RoutingInfo other;
    const UdpRoutingInfo u{htonl(ipv4), htons(port), rpc::detail::kUdpRoutingMagic};
    std::memcpy(other.bytes.data(), &u, sizeof(u));
    REQUIRE(t.resolve_remote_routing_info(other));
    return t.src_key_of(other);
  };
  CHECK(key_of(INADDR_LOOPBACK, t.local_port()) == t.src_key_of(resolved));
  CHECK(key_of(INADDR_LOOPBACK, static_cast<uint16_t>(t.local_port() + 1)) !=
        t.src_key_of(resolved));
  CHECK(key_of(INADDR_LOOPBACK + 1, t.local_port()) != t.src_key_of(resolved));
}

TEST_CASE("udp transport rejects routing info with a wrong magic or port 0") {
  UdpTransport t(make_config(), "127.0.0.1");
  RoutingInfo good;
  t.fill_local_routing_info(good);
  UdpRoutingInfo udp;
  std::memcpy(&udp, good.bytes.data(), sizeof(udp));

  RoutingInfo bad_magic = good;
  UdpRoutingInfo wrong = udp;
  wrong.magic = 0x1234;
  std::memcpy(bad_magic.bytes.data(), &wrong, sizeof(wrong));
  CHECK_FALSE(t.resolve_remote_routing_info(bad_magic));

  RoutingInfo no_port = good;
  wrong = udp;
  wrong.port_be = 0;
  std::memcpy(no_port.bytes.data(), &wrong, sizeof(wrong));
  CHECK_FALSE(t.resolve_remote_routing_info(no_port));

  RoutingInfo zeros;
  CHECK_FALSE(t.resolve_remote_routing_info(zeros));
  CHECK(t.resolve_remote_routing_info(good));
}

TEST_CASE("udp transport needs no memory registration") {
  UdpTransport t(make_config(), "127.0.0.1");
  std::vector<uint8_t> mem(4096);
  auto reg = t.register_memory(mem.data(), mem.size());
  REQUIRE(reg.has_value());
  CHECK(reg->lkey == 0);
  rpc::detail::Exposure e;
  CHECK_FALSE(t.expose_for_read(RoutingInfo{}, mem.data(), mem.size(), rpc::detail::MemReg{},
                                e));  // no bulk on udp
  t.deregister_memory(*reg);
}

TEST_CASE("udp offloads: runs of packets go as segmented sends and come back split, in order") {
  UdpTransport a(offload_config(true), "127.0.0.1");
  UdpTransport b(offload_config(true), "127.0.0.1");
  if (!a.gso_enabled() || !b.gro_enabled()) {
    WARN("this kernel lacks UDP GSO or GRO; the fallback tests below still run");
    return;
  }
  send_and_check(a, b, message_pkts(a, 0, 200));
  // Expect whole bursts in one send each, and merged datagrams at b.
  CHECK(a.gso_sends() > 0);
  CHECK(a.gso_sends() < 200 / 2);
  CHECK(b.gro_merged_receives() > 0);
}

TEST_CASE("udp offloads: a burst larger than the gather buffer goes out whole and in order") {
  UdpTransport a(offload_config(true), "127.0.0.1");
  UdpTransport b(offload_config(true), "127.0.0.1");
  if (!a.gso_enabled()) {
    WARN("this kernel lacks UDP GSO");
    return;
  }
  // Given one burst of full packets (runs of 40) more than the buffer that
  // gathers a sendmmsg's segmented messages holds: the run that does not
  // fit is cut there and continues in the next call.
  const size_t count = UdpTransport::kGsoGatherBytes / a.caps().max_pkt_bytes + 40;
  const std::vector<OutPkt> pkts = message_pkts(a, 0, count);
  send_and_check(a, b, pkts, count);
  CHECK(a.gso_sends() >= count / 40);
}

TEST_CASE("udp offloads: interleaved destinations and sizes still arrive whole at each") {
  UdpTransport a(offload_config(true), "127.0.0.1");
  UdpTransport b(offload_config(true), "127.0.0.1");
  UdpTransport c(offload_config(false), "127.0.0.1");
  const RoutingInfo to_b = route_to(b, a);
  const RoutingInfo to_c = route_to(c, a);
  // b, b, c, b, b, b(short), b, c, c ...: runs break at every change of
  // destination and after every short packet.
  std::vector<OutPkt> pkts;
  std::vector<const RoutingInfo*> routes;
  for (uint32_t i = 0; i < 32; i++) {
    const bool short_pkt = i % 6 == 5;
    pkts.push_back(make_pkt(i, short_pkt ? 7 + i : a.caps().max_data_per_pkt));
    routes.push_back(i % 4 == 2 || i % 9 == 8 ? &to_c : &to_b);
  }
  std::vector<TxItem> items = items_of(pkts, to_b);
  for (size_t i = 0; i < items.size(); i++) items[i].route = routes[i];
  a.tx_burst(items);
  std::vector<size_t> for_b, for_c;
  for (size_t i = 0; i < pkts.size(); i++) (routes[i] == &to_b ? for_b : for_c).push_back(i);
  const std::vector<std::vector<uint8_t>> got_b = receive_copies(b, for_b.size());
  const std::vector<std::vector<uint8_t>> got_c = receive_copies(c, for_c.size());
  REQUIRE(got_b.size() == for_b.size());
  REQUIRE(got_c.size() == for_c.size());
  for (size_t i = 0; i < for_b.size(); i++) check_copy(got_b[i], pkts[for_b[i]]);
  for (size_t i = 0; i < for_c.size(); i++) check_copy(got_c[i], pkts[for_c[i]]);
}

TEST_CASE(
    "udp offloads: merged packets are handed out in place, and held ones are not overwritten") {
  UdpTransport a(offload_config(true), "127.0.0.1");
  UdpTransport b(offload_config(true), "127.0.0.1");
  if (!a.gso_enabled() || !b.gro_enabled()) {
    WARN("this kernel lacks UDP GSO or GRO");
    return;
  }
  const RoutingInfo a_to_b = route_to(b, a);
  // Given a run of full packets sent as one segmented datagram
  const std::vector<OutPkt> first = message_pkts(a, 0, 20);
  a.tx_burst(items_of(first, a_to_b));
  std::array<RxPacket, 32> burst;
  size_t n = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (n == 0 && std::chrono::steady_clock::now() < deadline) n = b.rx_burst(burst);
  REQUIRE(n == first.size());
  REQUIRE(b.gro_merged_receives() > 0);
  // Expect them where the kernel put them, one behind the other in their
  // staging buffer (packet 0 is moved there from the ring buffer the read
  // began in).
  for (size_t i = 0; i < n; i++) check_pkt(burst[i], first[i]);
  for (size_t i = 1; i < n; i++) CHECK(burst[i].buf == burst[i - 1].buf + burst[i - 1].len);

  // Given more packets waiting while those are held, expect no read that
  // would overwrite them
  const std::vector<OutPkt> second = message_pkts(a, 100, 20);
  a.tx_burst(items_of(second, a_to_b));
  std::array<RxPacket, 32> more;
  CHECK(b.rx_burst(more) == 0);
  for (size_t i = 0; i < n; i++) check_pkt(burst[i], first[i]);
  // until every one of them is returned (here in two steps), and then the
  // waiting packets.
  b.post_recvs(1);
  CHECK(b.rx_burst(more) == 0);
  b.post_recvs(n - 1);
  const std::vector<std::vector<uint8_t>> got = receive_copies(b, second.size());
  REQUIRE(got.size() == second.size());
  for (size_t i = 0; i < got.size(); i++) check_copy(got[i], second[i]);
}

TEST_CASE("udp offloads: either end without them still talks to one with them") {
  SECTION("segmented sends to a socket without GRO arrive as single datagrams") {
    UdpTransport a(offload_config(true), "127.0.0.1");
    UdpTransport b(offload_config(false), "127.0.0.1");
    CHECK_FALSE(b.gro_enabled());
    send_and_check(a, b, message_pkts(a, 0, 100));
  }
  SECTION("single datagrams to a socket with GRO") {
    UdpTransport a(offload_config(false), "127.0.0.1");
    UdpTransport b(offload_config(true), "127.0.0.1");
    CHECK_FALSE(a.gso_enabled());
    send_and_check(a, b, message_pkts(a, 0, 100));
  }
}

TEST_CASE("udp offloads: a failed segmented send turns GSO off and the packets still go out") {
  UdpTransport a(offload_config(true), "127.0.0.1");
  UdpTransport b(offload_config(true), "127.0.0.1");
  if (!a.gso_enabled()) {
    WARN("this kernel lacks UDP GSO: the fallback is the only path");
    return;
  }
  // Given a kernel that refuses the next segmented send (as one whose
  // device cannot segment UDP would, with EIO)
  a.fail_next_gso_send_for_testing();
  // Expect every packet delivered anyway, and GSO off from then on.
  send_and_check(a, b, message_pkts(a, 0, 100));
  CHECK_FALSE(a.gso_enabled());
  CHECK(a.gso_sends() == 0);
}

TEST_CASE("udp offloads: off by configuration, and GRO off on a ring too small for it") {
  UdpTransport off(offload_config(false), "127.0.0.1");
  CHECK_FALSE(off.gso_enabled());
  CHECK_FALSE(off.gro_enabled());
  UdpTransport small(offload_config(true, UdpTransport::kMaxSegments - 1), "127.0.0.1");
  CHECK_FALSE(small.gro_enabled());
}

TEST_CASE("the udp transport counts datagrams the kernel dropped on its full receive buffer") {
  UdpTransport b(make_config(1500, /*rx_ring_size=*/64), "127.0.0.1");
  RoutingInfo info;
  b.fill_local_routing_info(info);
  UdpRoutingInfo wire;
  std::memcpy(&wire, info.bytes.data(), sizeof(wire));
  b.refresh_rx_drops();
  REQUIRE(b.rx_drops.ring_full == 0);
  // Given far more datagrams than b's receive buffer (its ring's worth)
  // holds, sent one by one from a plain socket while b does not receive
  const int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_addr.s_addr = wire.ipv4_be;
  to.sin_port = wire.port_be;
  std::vector<uint8_t> datagram(1000, 0x5A);
  uint64_t sent = 0;
  for (int i = 0; i < 2048; i++) {
    if (::sendto(fd, datagram.data(), datagram.size(), 0, reinterpret_cast<sockaddr*>(&to),
                 sizeof(to)) == static_cast<ssize_t>(datagram.size())) {
      sent++;
    }
  }
  ::close(fd);
  // Expect the kernel's drops reported, and every datagram sent either
  // received or counted
  b.refresh_rx_drops();
  CHECK(b.rx_drops.ring_full > 0);
  std::array<RxPacket, 32> burst{};
  uint64_t received = 0;
  for (size_t n; (n = b.rx_burst(burst)) > 0;) {
    received += n;
    b.post_recvs(n);
  }
  b.refresh_rx_drops();
  CHECK(received + b.rx_drops.ring_full == sent);
}
