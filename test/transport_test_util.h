// Helpers for the tests of one transport on real hardware or providers
// (test_verbs.cc, test_fabric.cc): a registered send buffer, datagram
// round trips at the transport level, and a connected client/server pair
// with an intruder endpoint for the source check.
#pragma once

#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "rpc/impl_access.h"
#include "rpc/rpc_impl.h"
#include "test_util.h"
#include "transport/transport.h"
#include "wire/pkt_hdr.h"

namespace rpc::test {

// A verbs Rpc or transport on the first active port, with a receive ring
// small enough for Soft-RoCE's queue limits.
inline RpcConfig verbs_config() { return RpcConfig{.transport = "verbs", .rx_ring_size = 256}; }

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
    return detail::TxItem{&to,      bytes.data(), bytes.data() + kPktHeaderBytes,
                          data_len, reg.lkey,     reg.lkey};
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
// Routes between two endpoints, each resolved by the other: a's route to
// b, and b's route to a.
struct RoutePair {
  detail::RoutingInfo to_b;
  detail::RoutingInfo to_a;
};
inline RoutePair resolve_each_other(detail::Transport& a, detail::Transport& b) {
  RoutePair r;
  b.fill_local_routing_info(r.to_b);
  REQUIRE(a.resolve_remote_routing_info(r.to_b));
  a.fill_local_routing_info(r.to_a);
  REQUIRE(b.resolve_remote_routing_info(r.to_a));
  return r;
}

inline void check_datagrams_arrive(detail::Transport& a, detail::Transport& b,
                                   const std::function<void()>& progress = {}) {
  const auto [to_b, to_a] = resolve_each_other(a, b);
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
    detail::impl_of(*server).transport().fill_local_routing_info(to_server);
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

// The bulk security model at the transport level: `intruder`, an endpoint
// that resolved the victim's routing info (`to_victim`) and knows the
// protocol, attacks the victim's memory with one-sided operations. Only a
// read of the live exposure, within its bounds, may succeed; writes never
// do; registered memory that is not exposed, guessed keys and the key of a
// revoked exposure all fail, and the victim's bytes never change.
// `progress` drives the victim (providers that serve RMA when polled).
struct BulkAttack {
  detail::Transport& victim;
  detail::Transport& intruder;
  const detail::RoutingInfo& to_victim;
  std::function<void()> progress;
  // The intruder's one-sided write (Transport has none: the engine never
  // writes; the concrete transports offer one to tests).
  std::function<bool(const detail::BulkOp&)> post_write;
  uint64_t next_cookie = 1;

  void drive() {
    std::array<detail::RxPacket, 32> rx{};
    if (progress) progress();
    const size_t got = victim.rx_burst(rx);
    if (got > 0) victim.post_recvs(got);
    // The intruder's receives complete there too where reads go by tagged
    // message (fabric over shm).
    const size_t mine = intruder.rx_burst(rx);
    if (mine > 0) intruder.post_recvs(mine);
  }

  // Posts one operation and waits for its completion: true if it succeeded.
  // Posting is retried while the provider pushes back (tcp;ofi_rxm while
  // it connects); one the intruder can never post counts as failed.
  bool attempt(bool write, uint8_t* local, const detail::MemReg& local_reg, uint64_t remote_addr,
               uint64_t key, uint32_t len) {
    if (write && !post_write) FAIL("BulkAttack: no post_write given for the intruder's writes");
    const uint64_t cookie = next_cookie++;
    const detail::BulkOp op{&to_victim, local, local_reg.lkey, local_reg.desc, remote_addr,
                            key,        len,   cookie};
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    bool posted = false;
    while (!posted && std::chrono::steady_clock::now() < deadline) {
      posted = write ? post_write(op) : intruder.post_read(op);
      if (!posted) drive();
    }
    if (!posted) return false;
    std::array<detail::BulkCompletion, 4> done{};
    while (std::chrono::steady_clock::now() < deadline) {
      drive();
      const size_t n = intruder.poll_bulk(done);
      for (size_t i = 0; i < n; i++) {
        if (done[i].cookie == cookie) return done[i].ok;
      }
    }
    FAIL("a one-sided operation neither completed nor failed within 10 s");
    return false;
  }

  void run() {
    // The victim: 64 KiB registered for local use, 4 KiB of it exposed.
    TxBuffer secret(victim, 64 << 10);
    for (size_t i = 0; i < secret.bytes.size(); i++) secret.bytes[i] = pattern_byte(i, 3);
    const std::vector<uint8_t> original = secret.bytes;
    constexpr size_t kExposedOffset = 8192;
    constexpr uint32_t kExposedLen = 4096;
    detail::Exposure exposure;
    // (to any reader: no transport attacked here binds an exposure to one)
    REQUIRE(victim.expose_for_read(detail::RoutingInfo{}, secret.bytes.data() + kExposedOffset,
                                   kExposedLen, secret.reg, exposure));
    const detail::Exposure live = exposure;
    // The intruder's own buffer.
    TxBuffer mine(intruder, 64 << 10);
    // A read that fails must not have written the intruder's buffer either.
    bool failed_read_wrote = false;
    auto read = [&](uint64_t addr, uint64_t key, uint32_t len) {
      std::fill(mine.bytes.begin(), mine.bytes.end(), 0xEE);
      const bool ok = attempt(false, mine.bytes.data(), mine.reg, addr, key, len);
      if (!ok &&
          std::any_of(mine.bytes.begin(), mine.bytes.end(), [](uint8_t b) { return b != 0xEE; }))
        failed_read_wrote = true;
      return ok;
    };
    auto write = [&](uint64_t addr, uint64_t key, uint32_t len) {
      std::fill(mine.bytes.begin(), mine.bytes.end(), 0xEE);
      return attempt(true, mine.bytes.data(), mine.reg, addr, key, len);
    };
    // Offsets into the secret in the exposure's address space (virtual
    // addresses, or offsets from the exposure's start).
    const auto at = [&](ptrdiff_t delta) {
      return live.remote_addr + static_cast<uint64_t>(delta);
    };

    // The legitimate read works (so the failures below mean something).
    CHECK(read(at(0), live.key, kExposedLen));
    CHECK(std::memcmp(mine.bytes.data(), original.data() + kExposedOffset, kExposedLen) == 0);
    // Writes change nothing, with the live key too. (Their completion may
    // still say ok: tcp;ofi_rxm completes a small write once it is sent.)
    write(at(0), live.key, 64);
    write(at(0), live.key, kExposedLen);
    CHECK(std::memcmp(secret.bytes.data(), original.data(), original.size()) == 0);
    // Reads outside the exposure, with its key: before, past the end.
    CHECK_FALSE(read(at(-1), live.key, 64));
    CHECK_FALSE(read(at(-static_cast<ptrdiff_t>(kExposedOffset)), live.key, 64));
    CHECK_FALSE(read(at(1), live.key, kExposedLen));
    CHECK_FALSE(read(at(kExposedLen), live.key, 64));
    // Guessed keys: small integers (the keys registrations once had) and
    // the neighbours of the live key, at the secret's start and inside the
    // exposure.
    int guessed_ok = 0;
    for (uint64_t key = 0; key < 64; key++) {
      if (key == live.key) continue;
      guessed_ok += read(at(-static_cast<ptrdiff_t>(kExposedOffset)), key, 64) ? 1 : 0;
      write(at(0), key, 64);
    }
    for (uint64_t key :
         {live.key + 1, live.key - 1, live.key ^ 0x100, live.key ^ (uint64_t{1} << 40)}) {
      guessed_ok += read(at(0), key, 64) ? 1 : 0;
    }
    CHECK(guessed_ok == 0);
    // The key of a revoked exposure.
    victim.revoke_exposure(exposure);
    CHECK_FALSE(read(at(0), live.key, kExposedLen));
    CHECK_FALSE(read(at(0), live.key, 64));
    CHECK_FALSE(failed_read_wrote);
    // And nothing of the victim's changed.
    CHECK(std::memcmp(secret.bytes.data(), original.data(), original.size()) == 0);
  }
};

}  // namespace rpc::test
