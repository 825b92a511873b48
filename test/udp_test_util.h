// Helpers of the udp transport tests (test_udp_transport.cc,
// test_udp_send_faults.cc): two transports on loopback, packets whose every
// byte is known, and receiving as the engine does.
#pragma once

#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <span>
#include <vector>

#include "librpc/config.h"
#include "transport/udp/udp_transport.h"
#include "wire/pkt_hdr.h"

namespace rpc::test::udp {

using rpc::kPktHeaderBytes;
using rpc::detail::RoutingInfo;
using rpc::detail::RxPacket;
using rpc::detail::TxItem;
using rpc::detail::UdpRoutingInfo;
using rpc::detail::UdpTransport;

inline rpc::RpcConfig make_config(size_t mtu_bytes = 1500, size_t rx_ring_size = 64) {
  rpc::RpcConfig config;
  config.mtu_bytes = mtu_bytes;
  config.rx_ring_size = rx_ring_size;
  return config;
}

// Routing info of `from`, resolved by `by` as a session handshake would.
inline RoutingInfo route_to(const UdpTransport& from, UdpTransport& by) {
  RoutingInfo info;
  from.fill_local_routing_info(info);
  REQUIRE(by.resolve_remote_routing_info(info));
  return info;
}

// Packet i carries a header and data_len data bytes derived from i, so the
// receiver can check every byte and tell packets apart.
struct OutPkt {
  std::array<uint8_t, kPktHeaderBytes> hdr;
  std::vector<uint8_t> data;
};

inline OutPkt make_pkt(uint32_t i, size_t data_len) {
  OutPkt pkt;
  for (size_t b = 0; b < kPktHeaderBytes; b++) pkt.hdr[b] = static_cast<uint8_t>(i * 7 + b);
  pkt.data.resize(data_len);
  for (size_t b = 0; b < data_len; b++) pkt.data[b] = static_cast<uint8_t>(i * 13 + b * 3);
  return pkt;
}

inline std::vector<TxItem> items_of(const std::vector<OutPkt>& pkts, const RoutingInfo& route) {
  std::vector<TxItem> items;
  for (const OutPkt& pkt : pkts) {
    items.push_back({&route, pkt.hdr.data(), pkt.data.empty() ? nullptr : pkt.data.data(),
                     static_cast<uint32_t>(pkt.data.size()), 0});
  }
  return items;
}

// Busy-polls until `want` packets arrived or a second passed (a bound on a
// broken test, not a timing assertion).
inline std::vector<RxPacket> receive(UdpTransport& t, size_t want) {
  std::vector<RxPacket> got;
  std::array<RxPacket, 16> burst;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (got.size() < want && std::chrono::steady_clock::now() < deadline) {
    const size_t n = t.rx_burst(std::span(burst).first(std::min(burst.size(), want - got.size())));
    got.insert(got.end(), burst.begin(), burst.begin() + static_cast<std::ptrdiff_t>(n));
  }
  return got;
}

inline void check_pkt(const RxPacket& rx, const OutPkt& sent) {
  REQUIRE(rx.len == kPktHeaderBytes + sent.data.size());
  CHECK(std::memcmp(rx.buf, sent.hdr.data(), kPktHeaderBytes) == 0);
  // memcmp with a null pointer is undefined even for zero bytes.
  if (!sent.data.empty()) {
    CHECK(std::memcmp(rx.buf + kPktHeaderBytes, sent.data.data(), sent.data.size()) == 0);
  }
}

inline rpc::RpcConfig offload_config(bool offload, size_t rx_ring_size = 256) {
  rpc::RpcConfig config = make_config(1500, rx_ring_size);
  config.udp_offload = offload;
  return config;
}

// Full-size packets with a short one at the end of each run of 40, as a
// multi-packet message's are.
inline std::vector<OutPkt> message_pkts(const UdpTransport& t, uint32_t first_id, size_t count) {
  std::vector<OutPkt> pkts;
  for (uint32_t i = 0; i < count; i++) {
    const bool last = (i + 1) % 40 == 0 || i + 1 == count;
    pkts.push_back(make_pkt(first_id + i, last ? 100 + i : t.caps().max_data_per_pkt));
  }
  return pkts;
}

// As the engine receives: each burst is read and returned before the next
// rx_burst (merged packets are handed out in place and the next read
// overwrites them). Returns copies of the packets.
inline std::vector<std::vector<uint8_t>> receive_copies(UdpTransport& t, size_t want) {
  std::vector<std::vector<uint8_t>> got;
  std::array<RxPacket, 16> burst;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (got.size() < want && std::chrono::steady_clock::now() < deadline) {
    const size_t n = t.rx_burst(std::span(burst).first(std::min(burst.size(), want - got.size())));
    for (size_t i = 0; i < n; i++) got.emplace_back(burst[i].buf, burst[i].buf + burst[i].len);
    t.post_recvs(n);
  }
  return got;
}

inline void check_copy(const std::vector<uint8_t>& rx, const OutPkt& sent) {
  check_pkt(RxPacket{const_cast<uint8_t*>(rx.data()), static_cast<uint32_t>(rx.size()), 0}, sent);
}

// Sends pkts from a to b in bursts of burst_size and checks every packet
// arrives in order, byte for byte.
inline void send_and_check(UdpTransport& a, UdpTransport& b, const std::vector<OutPkt>& pkts,
                           size_t burst_size = UdpTransport::kMaxBatch) {
  const RoutingInfo a_to_b = route_to(b, a);
  const std::vector<TxItem> items = items_of(pkts, a_to_b);
  for (size_t base = 0; base < items.size(); base += burst_size) {
    const size_t n = std::min(items.size() - base, burst_size);
    a.tx_burst(std::span(items).subspan(base, n));
    const std::vector<std::vector<uint8_t>> got = receive_copies(b, n);
    REQUIRE(got.size() == n);
    for (size_t i = 0; i < n; i++) check_copy(got[i], pkts[base + i]);
  }
}

}  // namespace rpc::test::udp
