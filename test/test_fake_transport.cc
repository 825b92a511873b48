// Tests of the in-process fake transport and its FakeNetwork switchboard.
#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "librpc/config.h"
#include "librpc/error.h"
#include "librpc/msg_buffer.h"
#include "transport/fake/fake_transport.h"

namespace rpc::detail {
namespace {

RpcConfig fake_config(size_t rx_ring_size = 8, size_t mtu_bytes = 1024) {
  RpcConfig config;
  config.transport = "fake";
  config.rx_ring_size = rx_ring_size;
  config.mtu_bytes = mtu_bytes;
  return config;
}

// A resolved route to `to`, as the engine would hold after session setup.
RoutingInfo route_to(FakeTransport& from, const FakeTransport& to) {
  RoutingInfo info;
  to.fill_local_routing_info(info);
  REQUIRE(from.resolve_remote_routing_info(info));
  return info;
}

std::array<uint8_t, kPktHeaderBytes> make_hdr(uint8_t tag) {
  std::array<uint8_t, kPktHeaderBytes> hdr{};
  for (size_t i = 0; i < hdr.size(); i++) hdr[i] = static_cast<uint8_t>(tag + i);
  return hdr;
}

// Sends one header-only packet whose first header byte is `tag`.
void send_tagged(FakeTransport& from, const RoutingInfo& route, uint8_t tag) {
  const auto hdr = make_hdr(tag);
  const TxItem item{&route, hdr.data(), nullptr, 0, 0};
  from.tx_burst(std::span<const TxItem>(&item, 1));
}

// Receives everything pending, returns the first header byte of each packet
// and gives the buffers back.
std::vector<uint8_t> receive_tags(FakeTransport& t) {
  std::vector<uint8_t> tags;
  std::array<RxPacket, 16> rx{};
  size_t n;
  while ((n = t.rx_burst(rx)) > 0) {
    for (size_t i = 0; i < n; i++) tags.push_back(rx[i].buf[0]);
    t.post_recvs(n);
  }
  return tags;
}

TEST_CASE("fake transport rejects an mtu outside its range and an empty rx ring") {
  FakeNetwork::instance().reset();
  CHECK_THROWS_AS(FakeTransport(fake_config(8, kPktHeaderBytes + 63)), Error);
  CHECK_THROWS_AS(FakeTransport(fake_config(8, 65536)), Error);
  CHECK_THROWS_AS(FakeTransport(fake_config(0, 1024)), Error);
  CHECK_NOTHROW(FakeTransport(fake_config(8, kPktHeaderBytes + 64)));
  CHECK_NOTHROW(FakeTransport(fake_config(8, 65535)));
}

TEST_CASE("fake transport reports its capabilities from the config") {
  FakeNetwork::instance().reset();
  FakeTransport t(fake_config(32, 2048));
  const TransportCaps caps = t.caps();
  CHECK(std::string(t.name()) == "fake");
  CHECK(caps.max_pkt_bytes == 2048);
  CHECK(caps.max_data_per_pkt == 2048 - kPktHeaderBytes);
  CHECK(caps.rx_ring_size == 32);
  CHECK(caps.max_inline_bytes == 0);
  CHECK(caps.bulk);
}

TEST_CASE("two fake transports exchange header and data bytes and see the sender's src_key") {
  FakeNetwork::instance().reset();
  FakeTransport a(fake_config());
  FakeTransport b(fake_config());
  CHECK(a.endpoint() != b.endpoint());
  const RoutingInfo a_to_b = route_to(a, b);
  const RoutingInfo b_to_a = route_to(b, a);

  // Given: one packet with data and one header-only packet in a burst
  const auto hdr0 = make_hdr(10);
  const auto hdr1 = make_hdr(50);
  std::vector<uint8_t> data(100);
  for (size_t i = 0; i < data.size(); i++) data[i] = static_cast<uint8_t>(200 - i);
  const std::array<TxItem, 2> items{
      TxItem{&a_to_b, hdr0.data(), data.data(), static_cast<uint32_t>(data.size()), 0, 0},
      TxItem{&a_to_b, hdr1.data(), nullptr, 0, 0, 0}};
  a.tx_burst(items);

  // Expect: both arrive in order, bytes intact, src_key naming a
  std::array<RxPacket, 4> rx{};
  REQUIRE(b.rx_burst(rx) == 2);
  REQUIRE(rx[0].len == kPktHeaderBytes + data.size());
  CHECK(std::memcmp(rx[0].buf, hdr0.data(), kPktHeaderBytes) == 0);
  CHECK(std::memcmp(rx[0].buf + kPktHeaderBytes, data.data(), data.size()) == 0);
  REQUIRE(rx[1].len == kPktHeaderBytes);
  CHECK(std::memcmp(rx[1].buf, hdr1.data(), kPktHeaderBytes) == 0);
  CHECK(rx[0].src_key == b.src_key_of(b_to_a));
  CHECK(rx[1].src_key == a.endpoint());
  b.post_recvs(2);

  // Expect: nothing reached the sender itself
  CHECK(a.rx_burst(rx) == 0);

  // Given: a reply the other way
  send_tagged(b, b_to_a, 7);
  // Expect: a sees it from b
  REQUIRE(a.rx_burst(rx) == 1);
  CHECK(rx[0].buf[0] == 7);
  CHECK(rx[0].src_key == b.endpoint());
  a.post_recvs(1);
}

TEST_CASE("a fake endpoint holds at most its ring's worth of packets and counts the rest") {
  FakeNetwork::instance().reset();
  FakeTransport a(fake_config());
  FakeTransport b(fake_config(/*rx_ring_size=*/4));
  const RoutingInfo to_b = route_to(a, b);
  // Given six packets sent before b polls its four receive buffers
  for (uint8_t tag = 1; tag <= 6; tag++) send_tagged(a, to_b, tag);
  // Expect the first four received, the other two dropped and counted
  CHECK(receive_tags(b) == std::vector<uint8_t>{1, 2, 3, 4});
  CHECK(b.rx_drops.ring_full == 2);
  // and room again once they were taken
  send_tagged(a, to_b, 7);
  CHECK(receive_tags(b) == std::vector<uint8_t>{7});
  CHECK(b.rx_drops.ring_full == 2);
}

TEST_CASE("fake network drops packets the filter drops") {
  FakeNetwork::instance().reset();
  FakeTransport a(fake_config());
  FakeTransport b(fake_config());
  const RoutingInfo a_to_b = route_to(a, b);

  // Given: a filter that drops every packet tagged 2
  FakeNetwork::instance().set_filter([](const FakePacket& p) {
    return p.bytes[0] == 2 ? FakeVerdict::kDrop : FakeVerdict::kDeliver;
  });
  for (uint8_t tag = 1; tag <= 3; tag++) send_tagged(a, a_to_b, tag);

  // Expect: only 1 and 3 arrive
  CHECK(receive_tags(b) == std::vector<uint8_t>{1, 3});
}

TEST_CASE("fake network delivers a duplicated packet twice") {
  FakeNetwork::instance().reset();
  FakeTransport a(fake_config());
  FakeTransport b(fake_config());
  const RoutingInfo a_to_b = route_to(a, b);

  FakeNetwork::instance().set_filter([](const FakePacket& p) {
    return p.bytes[0] == 1 ? FakeVerdict::kDuplicate : FakeVerdict::kDeliver;
  });
  send_tagged(a, a_to_b, 1);
  send_tagged(a, a_to_b, 2);

  CHECK(receive_tags(b) == std::vector<uint8_t>{1, 1, 2});
}

TEST_CASE("fake network holds packets and releases them in order") {
  FakeNetwork::instance().reset();
  FakeTransport a(fake_config());
  FakeTransport b(fake_config());
  const RoutingInfo a_to_b = route_to(a, b);

  // Given: packets 1..3 held, then 4 delivered
  FakeNetwork::instance().set_filter([](const FakePacket& p) {
    return p.bytes[0] <= 3 ? FakeVerdict::kHold : FakeVerdict::kDeliver;
  });
  for (uint8_t tag = 1; tag <= 4; tag++) send_tagged(a, a_to_b, tag);
  CHECK(FakeNetwork::instance().num_held() == 3);
  CHECK(receive_tags(b) == std::vector<uint8_t>{4});

  // Expect: release delivers them oldest first and empties the hold
  FakeNetwork::instance().release_held();
  CHECK(FakeNetwork::instance().num_held() == 0);
  CHECK(receive_tags(b) == std::vector<uint8_t>{1, 2, 3});
}

TEST_CASE("fake network holds packets and releases them in reverse order") {
  FakeNetwork::instance().reset();
  FakeTransport a(fake_config());
  FakeTransport b(fake_config());
  const RoutingInfo a_to_b = route_to(a, b);

  FakeNetwork::instance().set_filter([](const FakePacket&) { return FakeVerdict::kHold; });
  for (uint8_t tag = 1; tag <= 3; tag++) send_tagged(a, a_to_b, tag);
  CHECK(receive_tags(b).empty());

  FakeNetwork::instance().release_held(/*reverse=*/true);
  CHECK(FakeNetwork::instance().num_held() == 0);
  CHECK(receive_tags(b) == std::vector<uint8_t>{3, 2, 1});
}

TEST_CASE("fake network reset clears the filter, the capture and held packets") {
  FakeNetwork::instance().reset();
  FakeTransport a(fake_config());
  FakeTransport b(fake_config());
  const RoutingInfo a_to_b = route_to(a, b);

  FakeNetwork::instance().set_capture(true);
  FakeNetwork::instance().set_filter([](const FakePacket&) { return FakeVerdict::kHold; });
  send_tagged(a, a_to_b, 1);
  REQUIRE(FakeNetwork::instance().num_held() == 1);

  FakeNetwork::instance().reset();
  CHECK(FakeNetwork::instance().num_held() == 0);
  CHECK(FakeNetwork::instance().captured().empty());

  // Expect: with no filter and no capture, packets flow and are not recorded
  send_tagged(a, a_to_b, 2);
  CHECK(receive_tags(b) == std::vector<uint8_t>{2});
  CHECK(FakeNetwork::instance().captured().empty());
}

TEST_CASE("fake network captures every packet sent, including dropped ones") {
  FakeNetwork::instance().reset();
  FakeTransport a(fake_config());
  FakeTransport b(fake_config());
  const RoutingInfo a_to_b = route_to(a, b);

  FakeNetwork::instance().set_capture(true);
  FakeNetwork::instance().set_filter([](const FakePacket& p) {
    return p.bytes[0] == 2 ? FakeVerdict::kDrop : FakeVerdict::kDeliver;
  });
  const auto hdr = make_hdr(1);
  const std::array<uint8_t, 3> data{9, 8, 7};
  const TxItem item{&a_to_b, hdr.data(), data.data(), 3, 0};
  a.tx_burst(std::span<const TxItem>(&item, 1));
  send_tagged(a, a_to_b, 2);

  const std::vector<FakePacket> captured = FakeNetwork::instance().captured();
  REQUIRE(captured.size() == 2);
  CHECK(captured[0].src == a.endpoint());
  CHECK(captured[0].dst == b.endpoint());
  REQUIRE(captured[0].bytes.size() == kPktHeaderBytes + 3);
  CHECK(std::memcmp(captured[0].bytes.data(), hdr.data(), kPktHeaderBytes) == 0);
  CHECK(captured[0].bytes[kPktHeaderBytes + 2] == 7);
  CHECK(captured[1].bytes[0] == 2);

  FakeNetwork::instance().clear_captured();
  CHECK(FakeNetwork::instance().captured().empty());
}

TEST_CASE("fake network silently drops packets to a detached endpoint") {
  FakeNetwork::instance().reset();
  FakeTransport a(fake_config());
  RoutingInfo a_to_gone;
  {
    FakeTransport gone(fake_config());
    a_to_gone = route_to(a, gone);
  }
  send_tagged(a, a_to_gone, 1);  // must not crash or resurrect the inbox
  std::vector<FakePacket> out;
  uint64_t drops = 0;
  CHECK(FakeNetwork::instance().receive(static_cast<uint32_t>(a.src_key_of(a_to_gone)), 4, out,
                                        drops) == 0);
}

TEST_CASE(
    "fake rx_burst returns 0 while every ring buffer is in use and resumes after post_recvs") {
  FakeNetwork::instance().reset();
  FakeTransport a(fake_config());
  FakeTransport b(fake_config(/*rx_ring_size=*/4));
  const RoutingInfo a_to_b = route_to(a, b);
  for (uint8_t tag = 1; tag <= 4; tag++) send_tagged(a, a_to_b, tag);

  // Given: 3 received, then 1 more fills the ring although 2 more wait
  std::array<RxPacket, 3> rx3{};
  REQUIRE(b.rx_burst(rx3) == 3);
  CHECK(rx3[0].buf[0] == 1);
  CHECK(rx3[2].buf[0] == 3);
  std::array<RxPacket, 8> rx{};
  REQUIRE(b.rx_burst(rx) == 1);
  CHECK(rx[0].buf[0] == 4);
  for (uint8_t tag = 5; tag <= 6; tag++) send_tagged(a, a_to_b, tag);

  // Expect: a full ring receives nothing and keeps earlier buffers intact
  CHECK(b.rx_burst(rx) == 0);
  CHECK(rx3[0].buf[0] == 1);

  // Expect: returning 2 buffers lets exactly 2 more in, in order
  b.post_recvs(2);
  REQUIRE(b.rx_burst(rx) == 2);
  CHECK(rx[0].buf[0] == 5);
  CHECK(rx[1].buf[0] == 6);
  // The ring wrapped: packet 5 reuses packet 1's buffer.
  CHECK(rx[0].buf == rx3[0].buf);
  b.post_recvs(4);
  CHECK(b.rx_burst(rx) == 0);
}

TEST_CASE("fake rx_burst drops a packet larger than its ring buffers") {
  FakeNetwork::instance().reset();
  FakeTransport big(fake_config(8, 2048));
  FakeTransport small(fake_config(8, 128));
  const RoutingInfo route = route_to(big, small);

  const auto hdr = make_hdr(1);
  std::vector<uint8_t> data(1000, 0xab);
  const TxItem item{&route, hdr.data(), data.data(), static_cast<uint32_t>(data.size()), 0};
  big.tx_burst(std::span<const TxItem>(&item, 1));
  send_tagged(big, route, 2);

  CHECK(receive_tags(small) == std::vector<uint8_t>{2});
}

TEST_CASE("fake bulk reads copy from an exposure when they complete; writes are refused") {
  FakeNetwork::instance().reset();
  FakeTransport client(fake_config());
  FakeTransport server(fake_config());
  const RoutingInfo route = route_to(client, server);

  std::vector<uint8_t> remote(256);
  for (size_t i = 0; i < remote.size(); i++) remote[i] = static_cast<uint8_t>(i);
  std::vector<uint8_t> local(64, 0);
  Result<MemReg> remote_reg = server.register_memory(remote.data(), remote.size());
  Result<MemReg> local_reg = client.register_memory(local.data(), local.size());
  REQUIRE(remote_reg);
  REQUIRE(local_reg);
  Exposure exposure;
  REQUIRE(server.expose_for_read(RoutingInfo{}, remote.data() + 100, 64, *remote_reg, exposure));
  CHECK(exposure.active());
  CHECK(exposure.key != 0);
  CHECK(exposure.remote_addr == reinterpret_cast<uint64_t>(remote.data() + 100));

  // Given: a read of the exposure, held like a DMA not yet done
  FakeNetwork::instance().set_hold_bulk(true);
  const BulkOp read_op{
      &route,        local.data(), local_reg->lkey, local_reg->desc, exposure.remote_addr,
      exposure.key,  64,
      /*cookie=*/111};
  REQUIRE(client.post_read(read_op));
  std::array<BulkCompletion, 4> done{};
  CHECK(client.poll_bulk(done) == 0);
  CHECK(local[0] == 0);  // nothing written before the completion
  FakeNetwork::instance().set_hold_bulk(false);

  // Given: a write with the same (live) key
  std::fill(remote.begin(), remote.end(), 0x11);
  BulkOp write_op = read_op;
  write_op.cookie = 222;
  REQUIRE(client.post_write(write_op));

  // Expect: the read copied at its completion, the write failed and wrote nothing
  std::array<BulkCompletion, 1> one{};
  REQUIRE(client.poll_bulk(one) == 1);
  CHECK(one[0].cookie == 222);
  CHECK_FALSE(one[0].ok);
  REQUIRE(client.poll_bulk(done) == 1);
  CHECK(done[0].cookie == 111);
  CHECK(done[0].ok);
  CHECK(std::all_of(local.begin(), local.end(), [](uint8_t b) { return b == 0x11; }));
  CHECK(std::all_of(remote.begin(), remote.end(), [](uint8_t b) { return b == 0x11; }));
  CHECK(client.poll_bulk(done) == 0);

  server.revoke_exposure(exposure);
  CHECK_FALSE(exposure.active());
  CHECK(FakeNetwork::instance().num_exposures() == 0);
  server.deregister_memory(*remote_reg);
  client.deregister_memory(*local_reg);
}

TEST_CASE("fake bulk reads outside a live exposure complete with ok false") {
  FakeNetwork::instance().reset();
  FakeTransport client(fake_config());
  FakeTransport server(fake_config());
  const RoutingInfo route = route_to(client, server);

  std::vector<uint8_t> remote(128, 0x11);
  std::vector<uint8_t> local(64, 0x22);
  Result<MemReg> remote_reg = server.register_memory(remote.data(), remote.size());
  REQUIRE(remote_reg);
  Exposure exposure;
  REQUIRE(server.expose_for_read(RoutingInfo{}, remote.data(), 64, *remote_reg, exposure));
  const uint64_t base = exposure.remote_addr;

  auto op = [&](uint64_t addr, uint32_t len, uint64_t key, uint64_t cookie) {
    return BulkOp{&route, local.data(), 0, nullptr, addr, key, len, cookie};
  };
  // Given: a read running past the exposure (still inside the registered
  // region), one before it, one with an address that would wrap, one with
  // another key, one that exactly fits, and one after the revoke
  CHECK(client.post_read(op(base + 32, 64, exposure.key, 1)));
  CHECK(client.post_read(op(base - 1, 8, exposure.key, 2)));
  CHECK(client.post_read(op(UINT64_MAX - 4, 64, exposure.key, 3)));
  CHECK(client.post_read(op(base, 8, exposure.key + 1, 4)));
  CHECK(client.post_read(op(base, 64, exposure.key, 5)));
  std::array<BulkCompletion, 8> done{};
  REQUIRE(client.poll_bulk(done) == 5);
  const uint64_t old_key = exposure.key;
  server.revoke_exposure(exposure);
  CHECK(client.post_read(op(base, 8, old_key, 6)));
  REQUIRE(client.poll_bulk(std::span(done).subspan(5)) == 1);
  for (size_t i = 0; i < 6; i++) {
    INFO("cookie " << done[i].cookie);
    CHECK(done[i].cookie == i + 1);
    CHECK(done[i].ok == (done[i].cookie == 5));
  }
  // Expect: the failed ops touched neither buffer; the fitting one copied
  CHECK(std::all_of(remote.begin(), remote.end(), [](uint8_t b) { return b == 0x11; }));
  CHECK(std::all_of(local.begin(), local.end(), [](uint8_t b) { return b == 0x11; }));
  server.deregister_memory(*remote_reg);
}

TEST_CASE("fake routing info from another transport or an empty endpoint is rejected") {
  FakeNetwork::instance().reset();
  FakeTransport a(fake_config());

  RoutingInfo good;
  a.fill_local_routing_info(good);
  CHECK(a.resolve_remote_routing_info(good));
  CHECK(a.src_key_of(good) == a.endpoint());

  RoutingInfo bad_magic = good;
  bad_magic.bytes[4] ^= 0xff;
  CHECK_FALSE(a.resolve_remote_routing_info(bad_magic));

  RoutingInfo zeroed;
  CHECK_FALSE(a.resolve_remote_routing_info(zeroed));

  RoutingInfo no_endpoint = good;
  std::memset(no_endpoint.bytes.data(), 0, sizeof(uint32_t));
  CHECK_FALSE(a.resolve_remote_routing_info(no_endpoint));
}

TEST_CASE("fake transport counts resolutions that no release has matched yet") {
  FakeNetwork::instance().reset();
  FakeTransport a(fake_config());
  FakeTransport b(fake_config());
  // Given two sessions' routes to b and one that failed to resolve
  RoutingInfo first = route_to(a, b);
  RoutingInfo second = route_to(a, b);
  RoutingInfo bad{};
  CHECK_FALSE(a.resolve_remote_routing_info(bad));
  CHECK(a.live_resolutions() == 2);
  // Expect each release to give one back, and a stray release to be counted
  a.release_remote_routing_info(first);
  CHECK(a.live_resolutions() == 1);
  a.release_remote_routing_info(second);
  CHECK(a.live_resolutions() == 0);
  CHECK(a.unmatched_releases() == 0);
  a.release_remote_routing_info(first);
  CHECK(a.live_resolutions() == 0);
  CHECK(a.unmatched_releases() == 1);
}

}  // namespace
}  // namespace rpc::detail
