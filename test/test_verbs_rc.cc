// The verbs RC READ bulk path on a real RDMA device (Soft-RoCE in the VM of
// scripts/rxe-vm.sh): the connect handshake and QP sharing, split and
// queued reads, a failed QP resetting its sessions, and an intruder that
// tries to read or write a victim's memory through a legitimate RC pair.
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "subprocess.h"
#include "test_util.h"
#include "transport/verbs/verbs_transport.h"
#include "transport_test_util.h"

using namespace rpc;
using namespace rpc::detail;
using namespace rpc::test;
using namespace std::chrono_literals;

namespace {

RpcConfig verbs_config_with(RpcConfig config) {
  config.transport = "verbs";
  return config;
}

// The two ends of one session's connect, driven by hand: the client offers,
// the server resolves and answers, the client resolves the answer.
struct RcSession {
  RoutingInfo client_route;  // resolved at the client
  RoutingInfo server_route;  // resolved at the server
};
RcSession rc_connect(VerbsTransport& client, VerbsTransport& server, uint64_t hint) {
  RcSession s;
  RoutingInfo offer;
  client.fill_local_routing_info(offer);
  REQUIRE(client.prepare_connect(offer, hint));
  s.server_route = offer;
  REQUIRE(server.resolve_remote_routing_info(s.server_route));
  RoutingInfo answer;
  server.fill_connect_answer(s.server_route, answer);
  s.client_route = answer;
  REQUIRE(client.resolve_connect_answer(s.client_route, offer));
  return s;
}

// Polls until `count` reads completed; returns them.
std::vector<BulkCompletion> wait_reads(VerbsTransport& t, size_t count,
                                       std::chrono::milliseconds timeout = 20s) {
  std::vector<BulkCompletion> got;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::array<BulkCompletion, 16> out;
  while (got.size() < count && std::chrono::steady_clock::now() < deadline) {
    const size_t n = t.poll_bulk(out);
    got.insert(got.end(), out.begin(), out.begin() + static_cast<long>(n));
  }
  return got;
}

BulkOp read_op(const RoutingInfo& route, TxBuffer& dst, uint64_t remote_addr, uint64_t key,
               uint32_t len, uint64_t cookie) {
  return BulkOp{&route, dst.bytes.data(), dst.reg.lkey, dst.reg.desc, remote_addr, key, len,
                cookie};
}

}  // namespace

TEST_CASE("verbs RC: sessions between two Rpcs share one QP pair; it goes with the last session",
          "[verbs]") {
  VerbsTransport client(verbs_config());
  VerbsTransport server(verbs_config());
  REQUIRE(client.caps().bulk);

  // Given a first session: a fresh pair
  RcSession s1 = rc_connect(client, server, 7);
  CHECK(client.num_rc_qps() == 1);
  CHECK(server.num_rc_qps() == 1);
  // When a second session to the same server Rpc connects
  RcSession s2 = rc_connect(client, server, 7);
  // Expect it on the same pair (the spare offer destroyed)
  CHECK(client.num_rc_qps() == 1);
  CHECK(server.num_rc_qps() == 1);
  CHECK(client.bulk_path_of(s1.client_route) == client.bulk_path_of(s2.client_route));
  CHECK(client.bulk_path_of(s1.client_route) != 0);

  // Two connects under way at once share the pending offer, hence the pair.
  RoutingInfo o3, o4;
  client.fill_local_routing_info(o3);
  client.fill_local_routing_info(o4);
  REQUIRE(client.prepare_connect(o3, 9));
  REQUIRE(client.prepare_connect(o4, 9));
  CHECK(client.num_rc_qps() == 2);
  RoutingInfo r3 = o3, r4 = o4;
  REQUIRE(server.resolve_remote_routing_info(r4));  // answered out of order
  REQUIRE(server.resolve_remote_routing_info(r3));
  CHECK(server.num_rc_qps() == 2);
  RoutingInfo a3, a4;
  server.fill_connect_answer(r3, a3);
  server.fill_connect_answer(r4, a4);
  REQUIRE(client.resolve_connect_answer(a4, o4));
  REQUIRE(client.resolve_connect_answer(a3, o3));
  CHECK(client.num_rc_qps() == 2);
  CHECK(client.bulk_path_of(a3) == client.bulk_path_of(a4));

  // An offer whose connect is abandoned is destroyed.
  RoutingInfo o5;
  client.fill_local_routing_info(o5);
  REQUIRE(client.prepare_connect(o5, 11));
  CHECK(client.num_rc_qps() == 3);
  client.cancel_connect(o5);
  CHECK(client.num_rc_qps() == 2);

  // An answer naming none of the client's QPs is refused.
  RoutingInfo o6;
  client.fill_local_routing_info(o6);
  REQUIRE(client.prepare_connect(o6, 12));
  RoutingInfo forged = a3;  // the server's QP of another pair
  CHECK_FALSE(client.resolve_connect_answer(forged, o6));
  client.cancel_connect(o6);

  for (const RoutingInfo* r : {&s1.client_route, &s2.client_route, &a3, &a4}) {
    client.release_remote_routing_info(*r);
  }
  for (const RoutingInfo* r : {&s1.server_route, &s2.server_route, &r3, &r4}) {
    server.release_remote_routing_info(*r);
  }
  CHECK(client.num_rc_qps() == 0);
  CHECK(server.num_rc_qps() == 0);
  CHECK(client.num_remote_entries() + server.num_remote_entries() <= 2);  // retired AHs at most
}

TEST_CASE("verbs RC: reads are split into work requests and queued beyond the QP's read slots",
          "[verbs]") {
  VerbsTransport client(verbs_config());
  VerbsTransport server(verbs_config());
  RcSession s = rc_connect(client, server, 1);
  // A source larger than one work request, exposed like a payload.
  const uint32_t len = client.max_read_wr_bytes() * 2 + 12345;
  TxBuffer src(server, len);
  for (size_t i = 0; i < len; i++) src.bytes[i] = pattern_byte(i, 3);
  Exposure e;
  REQUIRE(server.expose_for_read(s.server_route, src.bytes.data(), len, src.reg, e));
  // More work requests than any device's read slots (rxe: 128): 3 per read.
  constexpr size_t kReads = 100;
  constexpr size_t kDsts = 4;
  std::vector<std::unique_ptr<TxBuffer>> dsts;
  for (size_t i = 0; i < kDsts; i++) dsts.push_back(std::make_unique<TxBuffer>(client, len));
  for (size_t i = 0; i < kReads; i++) {
    REQUIRE(
        client.post_read(read_op(s.client_route, *dsts[i % kDsts], e.remote_addr, e.key, len, i)));
  }
  const auto done = wait_reads(client, kReads);
  REQUIRE(done.size() == kReads);
  std::vector<bool> seen(kReads);
  for (const BulkCompletion& c : done) {
    CHECK(c.ok);
    REQUIRE(c.cookie < kReads);
    CHECK_FALSE(seen[c.cookie]);
    seen[c.cookie] = true;
  }
  for (auto& d : dsts) CHECK(std::memcmp(d->bytes.data(), src.bytes.data(), len) == 0);
  server.revoke_exposure(e);
  client.release_remote_routing_info(s.client_route);
  server.release_remote_routing_info(s.server_route);
}

TEST_CASE("verbs RC: a QP whose read fails reports its path once and takes no more reads",
          "[verbs]") {
  VerbsTransport client(verbs_config());
  VerbsTransport server(verbs_config());
  RcSession s = rc_connect(client, server, 1);
  const uint64_t path = client.bulk_path_of(s.client_route);
  TxBuffer src(server, 4096);
  TxBuffer dst(client, 4096);
  Exposure e;
  REQUIRE(server.expose_for_read(s.server_route, src.bytes.data(), 4096, src.reg, e));
  const Exposure revoked = e;
  server.revoke_exposure(e);
  // When a read hits a remote access error (on Soft-RoCE a peer that is
  // gone never times the read out; see docs/transports.md), with a second
  // read queued behind it
  REQUIRE(
      client.post_read(read_op(s.client_route, dst, revoked.remote_addr, revoked.key, 4096, 77)));
  REQUIRE(
      client.post_read(read_op(s.client_route, dst, revoked.remote_addr, revoked.key, 4096, 78)));
  // Expect both reads to fail and the path reported once
  const auto done = wait_reads(client, 2);
  REQUIRE(done.size() == 2);
  CHECK_FALSE(done[0].ok);
  CHECK_FALSE(done[1].ok);
  std::array<uint64_t, 4> failed;
  REQUIRE(client.poll_failed_bulk_paths(failed) == 1);
  CHECK(failed[0] == path);
  CHECK(client.poll_failed_bulk_paths(failed) == 0);
  // and no new read accepted on it, and a new connect to build a new pair
  CHECK_FALSE(client.post_read(read_op(s.client_route, dst, 0, 0, 4096, 79)));
  RcSession again = rc_connect(client, server, 1);
  CHECK(client.bulk_path_of(again.client_route) != path);
  client.release_remote_routing_info(s.client_route);
  server.release_remote_routing_info(s.server_route);
  client.release_remote_routing_info(again.client_route);
  server.release_remote_routing_info(again.server_route);
  CHECK(client.num_rc_qps() == 0);
}

TEST_CASE("verbs RC: reads to a peer that is gone are cancelled when the last session ends",
          "[verbs]") {
  VerbsTransport client(verbs_config());
  auto server = std::make_unique<VerbsTransport>(verbs_config());
  RcSession s = rc_connect(client, *server, 1);
  TxBuffer dst(client, 4096);
  Exposure e;
  {
    TxBuffer src(*server, 4096);
    REQUIRE(server->expose_for_read(s.server_route, src.bytes.data(), 4096, src.reg, e));
    server->revoke_exposure(e);
    server->release_remote_routing_info(s.server_route);
  }
  // Given a peer whose QP is gone (its process died: Soft-RoCE then never
  // times a read out; a NIC gives up after its retries)
  server.reset();
  REQUIRE(client.post_read(read_op(s.client_route, dst, e.remote_addr, e.key, 4096, 5)));
  // When the session over the pair ends with the read in flight
  client.release_remote_routing_info(s.client_route);
  // Expect the read reported failed (its buffer free again), the QP gone,
  // and no path reported: no session used it any more
  const auto done = wait_reads(client, 1);
  REQUIRE(done.size() == 1);
  CHECK(done[0].cookie == 5);
  CHECK_FALSE(done[0].ok);
  CHECK(client.num_rc_qps() == 0);
  std::array<uint64_t, 4> failed;
  CHECK(client.poll_failed_bulk_paths(failed) == 0);
}

// An intruder that knows the protocol connects a legitimate RC pair to the
// victim (through the victim's own connect handling) and tries to read and
// write the victim's memory with every key it could guess.
TEST_CASE("verbs RC: an intruder cannot read or write memory that is not exposed to it",
          "[verbs]") {
  VerbsTransport victim(verbs_config());
  VerbsTransport intruder(verbs_config());
  constexpr uint32_t kLen = 8192;
  TxBuffer secret(victim, kLen);  // registered like every MsgBuffer chunk
  for (size_t i = 0; i < kLen; i++) secret.bytes[i] = pattern_byte(i, 11);
  const std::vector<uint8_t> original = secret.bytes;
  auto* secret_mr = static_cast<ibv_mr*>(secret.reg.desc);
  TxBuffer loot(intruder, kLen);
  const auto remote = reinterpret_cast<uint64_t>(secret.bytes.data());

  // A positive control: exposed, the payload is readable by the pair.
  uint64_t hint = 100;
  RcSession s = rc_connect(intruder, victim, hint++);
  Exposure e;
  REQUIRE(victim.expose_for_read(s.server_route, secret.bytes.data(), kLen, secret.reg, e));
  REQUIRE(intruder.post_read(read_op(s.client_route, loot, e.remote_addr, e.key, kLen, 1)));
  auto done = wait_reads(intruder, 1);
  REQUIRE(done.size() == 1);
  CHECK(done[0].ok);
  CHECK(std::memcmp(loot.bytes.data(), original.data(), kLen) == 0);
  const uint64_t revoked_key = e.key;
  victim.revoke_exposure(e);

  // Keys an intruder would try: the registered chunk's own keys (local
  // access only), small integers, and a key that was valid until revoked.
  std::vector<uint64_t> keys{secret_mr->rkey, secret_mr->lkey, revoked_key, 0, 1, 2, 3,
                             0x100,           0x101,           0x200};
  for (uint64_t key : keys) {
    INFO("key " << key);
    // Each failure breaks the pair: a fresh one per attempt.
    intruder.release_remote_routing_info(s.client_route);
    victim.release_remote_routing_info(s.server_route);
    s = rc_connect(intruder, victim, hint++);
    std::fill(loot.bytes.begin(), loot.bytes.end(), 0);
    REQUIRE(intruder.post_read(read_op(s.client_route, loot, remote, key, kLen, 2)));
    done = wait_reads(intruder, 1);
    REQUIRE(done.size() == 1);
    CHECK_FALSE(done[0].ok);
    CHECK(std::count(loot.bytes.begin(), loot.bytes.end(), 0) == kLen);

    // An RDMA WRITE with the same key, posted raw on the intruder's QP.
    intruder.release_remote_routing_info(s.client_route);
    victim.release_remote_routing_info(s.server_route);
    s = rc_connect(intruder, victim, hint++);
    std::fill(loot.bytes.begin(), loot.bytes.end(), 0xEE);
    ibv_sge sge{reinterpret_cast<uint64_t>(loot.bytes.data()), kLen, loot.reg.lkey};
    ibv_send_wr wr{};
    wr.wr_id = 0xBAD;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = remote;
    wr.wr.rdma.rkey = static_cast<uint32_t>(key);
    ibv_send_wr* bad = nullptr;
    REQUIRE(ibv_post_send(intruder.rc_qp_of(s.client_route), &wr, &bad) == 0);
    ibv_wc wc{};
    int n = 0;
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    while (n == 0 && std::chrono::steady_clock::now() < deadline) {
      n = ibv_poll_cq(intruder.rc_cq(), 1, &wc);
    }
    REQUIRE(n == 1);
    CHECK(wc.wr_id == 0xBAD);
    CHECK(wc.status != IBV_WC_SUCCESS);
    CHECK(secret.bytes == original);
  }
  intruder.release_remote_routing_info(s.client_route);
  victim.release_remote_routing_info(s.server_route);
  CHECK(secret.bytes == original);
}

// A payload exposed for one peer is not readable by another peer that
// connected legitimately, even with the exact key: keys of per-payload
// registrations are the device's (index and an 8-bit variant, predictable
// from one's own), so the key alone must not be what protects it.
TEST_CASE("verbs RC: a payload exposed for one peer cannot be read by another with its key",
          "[verbs]") {
  VerbsTransport victim(verbs_config());
  VerbsTransport peer(verbs_config());
  VerbsTransport intruder(verbs_config());
  constexpr uint32_t kLen = 8192;
  TxBuffer payload(victim, kLen);
  for (size_t i = 0; i < kLen; i++) payload.bytes[i] = pattern_byte(i, 13);
  TxBuffer got(peer, kLen);
  TxBuffer loot(intruder, kLen);
  RcSession to_peer = rc_connect(peer, victim, 1);
  RcSession to_intruder = rc_connect(intruder, victim, 2);
  std::vector<uint64_t> keys;
  for (int round = 0; round < 3; round++) {
    Exposure e;
    REQUIRE(
        victim.expose_for_read(to_peer.server_route, payload.bytes.data(), kLen, payload.reg, e));
    keys.push_back(e.key);
    if (round == 0) {  // the peer it is for reads it
      REQUIRE(peer.post_read(read_op(to_peer.client_route, got, e.remote_addr, e.key, kLen, 1)));
      const auto done = wait_reads(peer, 1);
      REQUIRE(done.size() == 1);
      CHECK(done[0].ok);
      CHECK(got.bytes == payload.bytes);
    }
    if (round == 2) {  // the intruder, with the exact address and key
      REQUIRE(intruder.post_read(
          read_op(to_intruder.client_route, loot, e.remote_addr, e.key, kLen, 2)));
      const auto done = wait_reads(intruder, 1);
      REQUIRE(done.size() == 1);
      CHECK_FALSE(done[0].ok);
      CHECK(std::count(loot.bytes.begin(), loot.bytes.end(), 0) == kLen);
    }
    victim.revoke_exposure(e);
  }
  WARN("keys of three exposures in a row: " << keys[0] << ", " << keys[1] << ", " << keys[2]);
  peer.release_remote_routing_info(to_peer.client_route);
  victim.release_remote_routing_info(to_peer.server_route);
  intruder.release_remote_routing_info(to_intruder.client_route);
  victim.release_remote_routing_info(to_intruder.server_route);
}

// Devices without type-2B memory windows expose a registration of the
// payload instead. It works and dies on revoke; it does not stop another
// peer that has the key (reported, not asserted: that is why windows are
// preferred).
TEST_CASE("verbs RC: without memory windows, an exposure is a registration of the payload",
          "[verbs]") {
  VerbsTransport victim(verbs_config());
  VerbsTransport peer(verbs_config());
  VerbsTransport intruder(verbs_config());
  if (!victim.exposes_by_window()) WARN("this device has no type-2B windows");
  victim.use_memory_windows(false);
  REQUIRE_FALSE(victim.exposes_by_window());
  constexpr uint32_t kLen = 8192;
  TxBuffer payload(victim, kLen);
  for (size_t i = 0; i < kLen; i++) payload.bytes[i] = pattern_byte(i, 17);
  TxBuffer got(peer, kLen);
  TxBuffer loot(intruder, kLen);
  RcSession to_peer = rc_connect(peer, victim, 1);
  RcSession to_intruder = rc_connect(intruder, victim, 2);
  Exposure e;
  REQUIRE(victim.expose_for_read(to_peer.server_route, payload.bytes.data(), kLen, payload.reg, e));
  REQUIRE(peer.post_read(read_op(to_peer.client_route, got, e.remote_addr, e.key, kLen, 1)));
  auto done = wait_reads(peer, 1);
  REQUIRE(done.size() == 1);
  CHECK(done[0].ok);
  CHECK(got.bytes == payload.bytes);
  REQUIRE(
      intruder.post_read(read_op(to_intruder.client_route, loot, e.remote_addr, e.key, kLen, 2)));
  done = wait_reads(intruder, 1);
  REQUIRE(done.size() == 1);
  WARN("with a registration, another peer holding the key "
       << (done[0].ok ? "READ the payload" : "was refused"));
  // Revoked, it is gone for the peer it was for too.
  const Exposure revoked = e;
  victim.revoke_exposure(e);
  REQUIRE(peer.post_read(
      read_op(to_peer.client_route, got, revoked.remote_addr, revoked.key, kLen, 3)));
  done = wait_reads(peer, 1);
  REQUIRE(done.size() == 1);
  CHECK_FALSE(done[0].ok);
  peer.release_remote_routing_info(to_peer.client_route);
  victim.release_remote_routing_info(to_peer.server_route);
  intruder.release_remote_routing_info(to_intruder.client_route);
  victim.release_remote_routing_info(to_intruder.server_route);
}

// --- the engine over verbs with RC READ ---

namespace {

void register_foreground_echo(Nexus& nexus) {
  REQUIRE(nexus.register_handler(kEcho, echo_into_response));
}

}  // namespace

TEST_CASE("over verbs, random sizes from 16 KiB to 8 MiB travel by RC READ, byte for byte",
          "[verbs]") {
  Nexus nexus(NexusConfig{.uri = "127.0.0.1:0"});
  register_foreground_echo(nexus);
  ServerThread server(nexus, verbs_config_with({.rpc_id = 1}));
  Rpc client(nexus, verbs_config_with({.rpc_id = 0}));
  auto sn = client.create_session(nexus.uri(), 1);
  REQUIRE(sn);
  REQUIRE(run_until(client, [&] { return client.is_connected(*sn); }));
  std::mt19937_64 rng(42);
  std::vector<size_t> sizes{16384 + 1, size_t{1} << 20, size_t{8} << 20};
  for (int i = 0; i < 12; i++) sizes.push_back(16385 + rng() % ((size_t{8} << 20) - 16385));
  std::vector<EchoCall> calls(sizes.size());
  size_t done = 0;
  for (size_t i = 0; i < calls.size(); i++) {
    calls[i].total_done = &done;
    REQUIRE(calls[i].prepare(client, sizes[i], 100 + i));
    REQUIRE(calls[i].enqueue(client, *sn, kEcho) == Errc::kOk);
  }
  REQUIRE(run_until(
      client, [&] { return done == calls.size(); }, 120s));
  for (auto& c : calls) CHECK(c.echoed());
  for (auto& c : calls) c.release(client);
  // One read per response at the client, one per request at the server.
  CHECK(client.stats().bulk_reads == calls.size());
  CHECK(client.stats().bulk_reads_failed == 0);
  server.stop();
  CHECK(server.final_stats().bulk_reads == calls.size());
}

TEST_CASE("over verbs, with 10% of datagrams dropped, bulk requests complete once", "[verbs]") {
  Nexus nexus(NexusConfig{.uri = "127.0.0.1:0"});
  std::atomic<uint64_t> runs{0};
  REQUIRE(nexus.register_handler(kEcho, [&](ReqHandle& h) {
    runs++;
    echo_into_response(h);
  }));
  ServerThread server(nexus,
                      verbs_config_with({.rpc_id = 1, .rto_us = 5000, .drop_tx_fraction = 0.1}));
  Rpc client(nexus, verbs_config_with({.rpc_id = 0, .rto_us = 5000, .drop_tx_fraction = 0.1}));
  auto sn = client.create_session(nexus.uri(), 1);
  REQUIRE(sn);
  REQUIRE(run_until(client, [&] { return client.is_connected(*sn); }));
  std::vector<EchoCall> calls(60);
  size_t done = 0;
  for (size_t i = 0; i < calls.size(); i++) {
    calls[i].total_done = &done;
    REQUIRE(calls[i].prepare(client, 16385 + (i * 104729) % (size_t{1} << 20), 7 * i));
    REQUIRE(calls[i].enqueue(client, *sn, kEcho) == Errc::kOk);
  }
  REQUIRE(run_until(
      client, [&] { return done == calls.size(); }, 120s));
  for (auto& c : calls) CHECK(c.echoed());
  for (auto& c : calls) c.release(client);
  CHECK(runs.load() == calls.size());
  CHECK(client.stats().tx_dropped_injected > 0);
  CHECK(client.stats().bulk_reads >= calls.size());
  server.stop();
  CHECK(server.final_stats().bulk_reads >= calls.size());
  CHECK(server.final_stats().tx_dropped_injected > 0);
}

namespace {

constexpr const char* kKillServerUriEnv = "LIBRPC_TEST_VERBS_SERVER_URI";

// A server process: this test program run afresh (posix_spawn, not a fork
// of a process with Nexus threads and open verbs devices) with only the
// hidden server case below, serving echo over verbs at uri until killed.
std::unique_ptr<Subprocess> spawn_verbs_server(const std::string& uri) {
  return std::make_unique<Subprocess>(
      std::vector<std::string>{"/proc/self/exe", "verbs echo server process for the kill test"},
      std::vector<std::string>{std::string(kKillServerUriEnv) + "=" + uri});
}

}  // namespace

TEST_CASE("verbs echo server process for the kill test", "[.][verbs_server]") {
  const char* uri = std::getenv(kKillServerUriEnv);
  REQUIRE(uri != nullptr);
  Nexus nexus(NexusConfig{.uri = uri, .sm_timeout_ms = 20000, .failure_timeout_ms = 60000});
  REQUIRE(nexus.register_handler(kEcho, echo_into_response));
  Rpc rpc(nexus, RpcConfig{.rpc_id = 1, .transport = "verbs"});
  std::printf("serving at %s\n", uri);
  std::fflush(stdout);
  for (;;) rpc.run_event_loop(std::chrono::milliseconds(100));
}

TEST_CASE(
    "over verbs, a peer killed mid-transfer resets the session with the reason; a reconnect "
    "works",
    "[verbs]") {
  const std::string uri1 = "127.0.0.1:31891";
  const std::string uri2 = "127.0.0.1:31892";
  // One busy-polling server at a time: under emulation on a loaded host,
  // two starve the client's heartbeats.
  auto first = spawn_verbs_server(uri1);
  REQUIRE(first->started());
  REQUIRE(first->wait_for_output("serving at", 120s));  // slow under emulation
  std::unique_ptr<Subprocess> second;                   // killed after the client is gone
  {
    Nexus nexus(
        NexusConfig{.uri = "127.0.0.1:0", .sm_timeout_ms = 20000, .failure_timeout_ms = 15000});
    SessionEvents events;
    Rpc client(nexus, RpcConfig{.rpc_id = 0,
                                .transport = "verbs",
                                .request_timeout_ms = 60000,
                                .session_callback = events.callback()});
    auto sn = client.create_session(uri1, 1);
    REQUIRE(sn);
    REQUIRE(run_until(
        client, [&] { return client.is_connected(*sn); }, 60s));
    // When the server dies while six 8 MiB echoes are under way (reads of
    // requests and responses queued behind each other on the RC pair)
    std::vector<EchoCall> calls(6);
    size_t done = 0;
    for (size_t i = 0; i < calls.size(); i++) {
      calls[i].total_done = &done;
      REQUIRE(calls[i].prepare(client, size_t{8} << 20, 5 + i));
      REQUIRE(calls[i].enqueue(client, *sn, kEcho) == Errc::kOk);
    }
    REQUIRE(run_until(
        client, [&] { return client.stats().bulk_reads > 0; }, 60s));
    first->kill(SIGKILL);
    first->wait();
    // Expect the unfinished requests to fail and the session to be reset:
    // by the RC QP's retries running out, or (Soft-RoCE does not time out a
    // read whose responder QP is gone) by heartbeats
    run_until(
        client, [&] { return events.has(*sn, SessionEvent::kReset) && done == calls.size(); },
        120s);
    INFO("bulk reads " << client.stats().bulk_reads << ", failed "
                       << client.stats().bulk_reads_failed << ", orphaned "
                       << client.stats().bulk_reads_orphaned);
    CHECK(events.has(*sn, SessionEvent::kReset));
    REQUIRE(done == calls.size());
    size_t failed = 0;
    for (auto& c : calls) {
      CHECK(c.completions == 1);
      if (c.errc == Errc::kOk) {
        CHECK(c.echoed());
      } else {
        CHECK(c.errc == Errc::kSessionReset);
        failed++;
      }
    }
    CHECK(failed > 0);  // the kill came mid-transfer
    const SmErr why = events.reason(*sn, SessionEvent::kReset);
    WARN(failed << " of " << calls.size() << " requests failed; reset reason: " << to_string(why)
                << "; bulk paths failed " << client.stats().bulk_paths_failed);
    CHECK((why == SmErr::kBulkPathFailed || why == SmErr::kRemoteFailed));
    // and a new session (to a live server) to work over a new pair
    second = spawn_verbs_server(uri2);
    REQUIRE(second->started());
    REQUIRE(second->wait_for_output("serving at", 120s));
    auto sn2 = client.create_session(uri2, 1);
    REQUIRE(sn2);
    REQUIRE(run_until(
        client, [&] { return client.is_connected(*sn2); }, 90s));
    EchoCall again;
    REQUIRE(again.prepare(client, size_t{1} << 20, 6));
    REQUIRE(again.enqueue(client, *sn2, kEcho) == Errc::kOk);
    REQUIRE(run_until(
        client, [&] { return again.completions > 0; }, 60s));
    CHECK(again.echoed());
    for (auto& c : calls) c.release(client);
    again.release(client);
  }
}
