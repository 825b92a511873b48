// Helpers for the tests of one transport on real hardware or providers
// (test_verbs.cc, test_fabric.cc): a registered send buffer, datagram
// round trips at the transport level, and a connected client/server pair
// with an intruder endpoint for the source check.
#pragma once

#include <array>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "rpc/rpc_impl.h"
#include "test_util.h"
#include "transport/transport.h"
#include "wire/pkt_hdr.h"

namespace rpc::test {

// One buffer registered with a transport, to send from.
struct TxBuffer {
  detail::Transport& transport;
  std::vector<uint8_t> bytes;
  detail::MemReg reg;

  TxBuffer(detail::Transport& t, size_t size) : transport(t), bytes(size) {
    auto r = t.register_memory(bytes.data(), bytes.size());
    REQUIRE(r);
    reg = *r;
  }
  ~TxBuffer() { transport.deregister_memory(reg); }
  TxBuffer(const TxBuffer&) = delete;
  TxBuffer& operator=(const TxBuffer&) = delete;

  detail::TxItem item(const detail::RoutingInfo& to, uint32_t data_len) const {
    return detail::TxItem{&to, bytes.data(), bytes.data() + kPktHeaderBytes, data_len, reg.lkey};
  }
};

// Polls `rx` until one datagram arrives, or 5 s pass; `progress` runs in
// between (providers that move data only when their sender polls).
inline bool receive_one(detail::Transport& rx, detail::RxPacket& out,
                        const std::function<void()>& progress = {}) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  std::array<detail::RxPacket, 32> pkts{};
  while (std::chrono::steady_clock::now() < deadline) {
    if (progress) progress();
    if (rx.rx_burst(pkts) > 0) {
      out = pkts[0];
      return true;
    }
  }
  return false;
}

// Sends a full-size datagram (zero copy) and a bare header (inlined or
// injected) from a to b. Expects both whole, with the source key b
// expects of a.
inline void check_datagrams_arrive(detail::Transport& a, detail::Transport& b,
                                   const std::function<void()>& progress = {}) {
  detail::RoutingInfo to_b;
  b.fill_local_routing_info(to_b);
  REQUIRE(a.resolve_remote_routing_info(to_b));
  detail::RoutingInfo to_a;
  a.fill_local_routing_info(to_a);
  REQUIRE(b.resolve_remote_routing_info(to_a));
  const detail::TransportCaps caps = a.caps();
  TxBuffer buf(a, caps.max_pkt_bytes);
  for (size_t i = 0; i < buf.bytes.size(); i++) buf.bytes[i] = pattern_byte(i, 5);
  for (uint32_t data_len : {static_cast<uint32_t>(caps.max_data_per_pkt), 0u}) {
    INFO("data_len " << data_len);
    const detail::TxItem item = buf.item(to_b, data_len);
    a.tx_burst({&item, 1});
    detail::RxPacket pkt{};
    REQUIRE(receive_one(b, pkt, progress));
    CHECK(pkt.len == kPktHeaderBytes + data_len);
    CHECK(std::memcmp(pkt.buf, buf.bytes.data(), pkt.len) == 0);
    CHECK(pkt.src_key == b.src_key_of(to_a));
    b.post_recvs(1);
  }
}

// A server Rpc (id 1, echo) and a client Rpc with one connected session,
// in this thread, both with `config` (its rpc_id is replaced), on one
// Nexus at `uri`.
struct ConnectedPair {
  Nexus nexus;
  std::unique_ptr<Rpc> server;
  std::unique_ptr<Rpc> client;
  SessionNum sn = kInvalidSessionNum;

  explicit ConnectedPair(RpcConfig config, const std::string& uri = "127.0.0.1:0")
      : nexus(NexusConfig{.uri = uri}) {
    REQUIRE(nexus.register_handler(kEcho, echo_into_response));
    config.rpc_id = 1;
    server = std::make_unique<Rpc>(nexus, config);
    config.rpc_id = 0;
    client = std::make_unique<Rpc>(nexus, config);
    auto s = client->create_session(nexus.uri(), 1);
    REQUIRE(s);
    sn = *s;
    REQUIRE(run_all_until({client.get(), server.get()}, [&] { return client->is_connected(sn); }));
  }

  // One echo of `size` bytes; true when it came back intact.
  bool echo_ok(size_t size, uint64_t seed) {
    EchoCall call;
    REQUIRE(call.prepare(*client, size, seed));
    REQUIRE(call.enqueue(*client, sn, kEcho) == Errc::kOk);
    REQUIRE(run_all_until({client.get(), server.get()}, [&] { return call.completions > 0; }));
    const bool ok = call.echoed();
    call.release(*client);
    return ok;
  }

  // `intruder` (its own endpoint) sends a well-formed 8-byte request for
  // the server's session 0; returns once the server has received it.
  void send_forged_request(detail::Transport& intruder) {
    detail::RoutingInfo to_server;
    server->impl().transport().fill_local_routing_info(to_server);
    REQUIRE(intruder.resolve_remote_routing_info(to_server));
    TxBuffer buf(intruder, 64);
    detail::PktHdr::make(detail::PktType::kReq, kEcho, 8, 0, 0, 0).store(buf.bytes.data());
    const detail::TxItem item = buf.item(to_server, 8);
    const uint64_t before = server->stats().rx_pkts;
    intruder.tx_burst({&item, 1});
    std::array<detail::RxPacket, 1> none{};
    REQUIRE(run_until(*server, [&] {
      intruder.rx_burst(std::span<detail::RxPacket>(none.data(), 0));  // progress its send
      return server->stats().rx_pkts > before;
    }));
  }
};

}  // namespace rpc::test
