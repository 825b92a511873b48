// The fabric transport itself, with the libfabric providers that run on any
// Linux machine: tcp;ofi_rxm and shm (the same FI_EP_RDM calls as efa), or
// with the one LIBRPC_TEST_FABRIC_PROVIDER names (test/fabric/
// run_in_rxe_vm.sh: verbs;ofi_rxm on Soft-RoCE). The engine over fabric is
// covered by running the [any_transport] integration cases with
// LIBRPC_TEST_TRANSPORT=fabric (test/meson.build).
#include <netinet/in.h>

#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include "rpc/impl_access.h"
#include "transport/fabric/fabric_transport.h"
#include "transport_test_util.h"

using namespace rpc;
using namespace rpc::detail;
using namespace rpc::test;

namespace {

// The providers the cases run over: LIBRPC_TEST_FABRIC_PROVIDER alone when
// set, else the two every Linux machine has.
std::vector<std::string> providers_under_test() {
  const char* provider = std::getenv("LIBRPC_TEST_FABRIC_PROVIDER");
  if (provider != nullptr && *provider != '\0') return {provider};
  return {"tcp;ofi_rxm", "shm"};
}

// For the cases about ofi_rxm (its sources, its sockaddr_in names): the
// provider under test if it is rxm over something, else tcp;ofi_rxm.
std::string rxm_provider() {
  const std::string first = providers_under_test().front();
  return first.find(";ofi_rxm") != std::string::npos ? first : "tcp;ofi_rxm";
}

RpcConfig fabric_config(const std::string& provider) {
  return RpcConfig{.transport = "fabric", .fabric_provider = provider, .rx_ring_size = 256};
}

FabricRoutingInfo fabric_info_of_test(const RoutingInfo& info) {
  FabricRoutingInfo f;
  std::memcpy(&f, info.bytes.data(), sizeof(f));
  return f;
}

// The providers under test with a bulk path: all of them (shm's reads go by
// tagged message, see "over shm, large messages are read by tagged message").
std::vector<std::string> bulk_providers() { return providers_under_test(); }

bool shm_under_test() {
  const std::vector<std::string> providers = providers_under_test();
  return std::find(providers.begin(), providers.end(), "shm") != providers.end();
}

// Where sockaddr_in's port lies in RoutingInfo::bytes.
constexpr size_t kSockaddrPortOffset = offsetof(FabricRoutingInfo, addr) + 2;

}  // namespace

TEST_CASE("an mtu_bytes set by the user bounds the fabric packet size", "[fabric]") {
  const std::string provider = GENERATE(from_range(providers_under_test()));
  INFO("provider " << provider);
  RpcConfig config = fabric_config(provider);
  config.mtu_bytes = 2000;
  FabricTransport a(config, "127.0.0.1");
  CHECK(a.caps().max_pkt_bytes == 2000);
}

TEST_CASE("fabric endpoints exchange datagrams and name their source", "[fabric]") {
  const std::string provider = GENERATE(from_range(providers_under_test()));
  INFO("provider " << provider);
  FabricTransport a(fabric_config(provider), "127.0.0.1");
  FabricTransport b(fabric_config(provider), "127.0.0.1");
  CHECK(a.provider_name() == provider);
  // shm misreports unknown senders, so its sources are not used (the
  // "never resolved" case below shows why on a provider that does it right).
  CHECK(a.knows_sources() == (provider != "shm"));
  const TransportCaps caps = a.caps();
  // mtu_bytes 0: shm's inject size (4096: sent with no rendezvous);
  // tcp;ofi_rxm's eager size, capped at a jumbo frame (its inject size, 64,
  // made a 4 KB echo 3.5x slower); else 1500
  const size_t auto_pkt_bytes =
      provider == "shm" ? 4096u : (provider == "tcp;ofi_rxm" ? 9000u : 1500u);
  CHECK(caps.max_pkt_bytes == auto_pkt_bytes);
  CHECK(caps.max_data_per_pkt == caps.max_pkt_bytes - kPktHeaderBytes);
  CHECK(caps.bulk);  // on shm by tagged message: "over shm, large messages are read by ..."
  // shm is memory, not a network: no congestion control over it
  CHECK(caps.congestion_free == (provider == "shm"));
  // A full-size datagram goes out zero copy, a bare header injected
  check_datagrams_arrive(a, b, [&] { a.rx_burst({}); });
  // And resolving the same peer again reuses its address-vector entry, so
  // every session to it expects the same source
  RoutingInfo to_a;
  a.fill_local_routing_info(to_a);
  RoutingInfo to_a_again = to_a;
  REQUIRE(b.resolve_remote_routing_info(to_a));
  REQUIRE(b.resolve_remote_routing_info(to_a_again));
  CHECK(b.src_key_of(to_a_again) == b.src_key_of(to_a));
}

TEST_CASE("a datagram from an endpoint the receiver never resolved has an unknown source",
          "[fabric]") {
  // Only over rxm: shm (1.17) reports such a sender as the first peer in
  // its address vector, which is why the transport ignores shm's sources.
  const std::string provider = rxm_provider();
  INFO("provider " << provider);
  FabricTransport known(fabric_config(provider), "127.0.0.1");
  FabricTransport rx(fabric_config(provider), "127.0.0.1");
  FabricTransport stranger(fabric_config(provider), "127.0.0.1");
  RoutingInfo to_known;
  known.fill_local_routing_info(to_known);
  REQUIRE(rx.resolve_remote_routing_info(to_known));
  RoutingInfo to_rx;
  rx.fill_local_routing_info(to_rx);
  REQUIRE(stranger.resolve_remote_routing_info(to_rx));
  TxBuffer buf(stranger, 64);
  const TxItem item = buf.item(to_rx, 8);
  stranger.tx_burst({&item, 1});
  RxPacket pkt{};
  REQUIRE(receive_one(rx, pkt, [&] { stranger.rx_burst({}); }));
  CHECK(pkt.src_key != rx.src_key_of(to_known));
}

TEST_CASE("a peer's address-vector entry is removed when the last session to it releases it",
          "[fabric]") {
  const std::string provider = GENERATE(from_range(providers_under_test()));
  INFO("provider " << provider);
  FabricTransport a(fabric_config(provider), "127.0.0.1");
  FabricTransport b(fabric_config(provider), "127.0.0.1");
  FabricTransport c(fabric_config(provider), "127.0.0.1");
  RoutingInfo b_info;
  b.fill_local_routing_info(b_info);
  RoutingInfo c_info;
  c.fill_local_routing_info(c_info);

  // Given two sessions to b and one to c
  RoutingInfo to_b1 = b_info;
  RoutingInfo to_b2 = b_info;
  RoutingInfo to_c = c_info;
  REQUIRE(a.resolve_remote_routing_info(to_b1));
  REQUIRE(a.resolve_remote_routing_info(to_b2));
  REQUIRE(a.resolve_remote_routing_info(to_c));
  CHECK(a.num_remote_entries() == 2);
  // Expect b's entry to stay while one session still uses it
  a.release_remote_routing_info(to_b1);
  CHECK(a.num_remote_entries() == 2);
  a.release_remote_routing_info(to_b2);
  CHECK(a.num_remote_entries() == 1);
  a.release_remote_routing_info(to_c);
  CHECK(a.num_remote_entries() == 0);
  // and a stray release to change nothing
  a.release_remote_routing_info(to_c);
  CHECK(a.num_remote_entries() == 0);

  // When peers keep coming and going
  for (int i = 0; i < 500; i++) {
    RoutingInfo x = i % 2 == 0 ? b_info : c_info;
    REQUIRE(a.resolve_remote_routing_info(x));
    a.release_remote_routing_info(x);
  }
  // Expect nothing left behind, and datagrams to flow after re-resolving
  CHECK(a.num_remote_entries() == 0);
  check_datagrams_arrive(a, b, [&] { a.rx_burst({}); });
  CHECK(a.num_remote_entries() == 1);
}

TEST_CASE("a fabric endpoint lets go of a peer whose datagrams it has not read yet", "[fabric]") {
  // libfabric's ofi_rxm over verbs (1.17) closed a connection's endpoint and
  // then processed the receives still queued for it, reposting their buffers
  // on the freed endpoint: SIGSEGV in fi_close or fi_av_remove. The
  // transport asks for rxm's shared receive context, which outlives them.
  const std::string provider = GENERATE(from_range(providers_under_test()));
  const bool close_endpoint = GENERATE(true, false);
  INFO("provider " << provider << (close_endpoint ? ", closing the endpoint" : ", releasing"));
  auto a = std::make_unique<FabricTransport>(fabric_config(provider), "127.0.0.1");
  FabricTransport b(fabric_config(provider), "127.0.0.1");
  const auto [to_b, to_a] = resolve_each_other(*a, b);
  TxBuffer buf(b, b.caps().max_pkt_bytes);
  const TxItem item = buf.item(to_a, static_cast<uint32_t>(b.caps().max_data_per_pkt));
  // Given a connection from b to a that has carried a datagram
  b.tx_burst({&item, 1});
  RxPacket pkt{};
  REQUIRE(receive_one(*a, pkt, [&] { b.rx_burst({}); }));
  a->post_recvs(1);
  // When b sends more, zero copy, and every send completes (over RDMA: in
  // a's receive queue), while a reads nothing
  const std::vector<TxItem> more(8, item);
  b.tx_burst(more);
  REQUIRE(wait_until([&] {
    b.rx_burst({});
    return b.sends_outstanding() == 0;
  }));
  // Expect a to let go of b, its whole endpoint or its last route to b,
  // and both to live on
  if (close_endpoint) {
    a.reset();
  } else {
    a->release_remote_routing_info(to_b);
    CHECK(a->num_remote_entries() == 0);
    a->rx_burst({});
  }
  b.rx_burst({});
  CHECK(b.tx_dropped() == 0);
}

TEST_CASE("thousands of distinct peers coming and going leave no address-vector entries",
          "[fabric]") {
  // rxm's addresses are sockaddr_in: other ports make other peers
  // (inserting one connects nothing until a datagram is sent to it).
  const std::string provider = rxm_provider();
  INFO("provider " << provider);
  FabricTransport a(fabric_config(provider), "127.0.0.1");
  FabricTransport b(fabric_config(provider), "127.0.0.1");
  RoutingInfo b_info;
  b.fill_local_routing_info(b_info);
  REQUIRE(fabric_info_of_test(b_info).addr_len == sizeof(sockaddr_in));
  std::vector<RoutingInfo> live;
  for (uint16_t i = 0; i < 20000; i++) {
    RoutingInfo peer = b_info;
    const uint16_t port = static_cast<uint16_t>(10000 + i);
    std::memcpy(peer.bytes.data() + kSockaddrPortOffset, &port, sizeof(port));
    REQUIRE(a.resolve_remote_routing_info(peer));
    live.push_back(peer);
    // a few sessions at a time, as on a server clients connect to and leave
    if (live.size() == 8) {
      for (const RoutingInfo& r : live) a.release_remote_routing_info(r);
      live.clear();
    }
  }
  for (const RoutingInfo& r : live) a.release_remote_routing_info(r);
  CHECK(a.num_remote_entries() == 0);
}

TEST_CASE("fabric routing info from another transport or with stray bytes is refused", "[fabric]") {
  FabricTransport a(fabric_config(providers_under_test().front()), "127.0.0.1");
  RoutingInfo good;
  a.fill_local_routing_info(good);

  RoutingInfo bad_magic = good;
  bad_magic.bytes[0] ^= 0xFF;
  CHECK_FALSE(a.resolve_remote_routing_info(bad_magic));
  RoutingInfo too_long = good;
  too_long.bytes[2] = 37;  // addr_len beyond the 36 address bytes
  CHECK_FALSE(a.resolve_remote_routing_info(too_long));
  RoutingInfo empty = good;
  empty.bytes[2] = 0;
  CHECK_FALSE(a.resolve_remote_routing_info(empty));
  RoutingInfo stray = good;
  stray.bytes[44] = 1;  // where the resolved fi_addr goes
  CHECK_FALSE(a.resolve_remote_routing_info(stray));
  RoutingInfo zeros{};
  CHECK_FALSE(a.resolve_remote_routing_info(zeros));
  CHECK(a.resolve_remote_routing_info(good));
}

TEST_CASE("a fabric provider that does not exist is named in the error", "[fabric]") {
  CHECK_THROWS_WITH(FabricTransport(fabric_config("no_such_provider"), "127.0.0.1"),
                    Catch::Contains("no_such_provider"));
}

TEST_CASE("an unknown fabric provider's error lists the providers that are available", "[fabric]") {
  CHECK_THROWS_WITH(FabricTransport(fabric_config("no_such_provider"), "127.0.0.1"),
                    Catch::Contains("providers with RDM endpoints here:") &&
                        Catch::Contains("tcp;ofi_rxm") && Catch::Contains("shm"));
}

TEST_CASE("with no provider configured, the fabric transport names the one it picked", "[fabric]") {
  FabricTransport t(fabric_config(""), "127.0.0.1");
  CHECK_FALSE(t.provider().empty());
  CHECK(t.provider() == t.provider_name());
}

TEST_CASE("over fabric, large messages travel by one-sided read", "[fabric]") {
  const std::string provider = GENERATE(from_range(bulk_providers()));
  INFO("provider " << provider);
  RpcConfig config = fabric_config(provider);
  config.rx_ring_size = 1024;
  ConnectedPair p(config);
  // When requests above the bulk threshold are echoed
  for (size_t size : {size_t{64} << 10, size_t{1} << 20, (size_t{3} << 20) + 5}) {
    INFO("size " << size);
    CHECK(p.echo_ok(size, size % 251));
  }
  // Expect each request and each response to have been read, not sent in
  // packets
  CHECK(p.server->stats().bulk_reads == 3);
  CHECK(p.client->stats().bulk_reads == 3);
}

TEST_CASE("over fabric, a long read goes as parts and completes once, failed if any part fails",
          "[fabric]") {
  const std::string provider = GENERATE(from_range(bulk_providers()));
  INFO("provider " << provider);
  FabricTransport owner(fabric_config(provider), "127.0.0.1");
  FabricTransport reader(fabric_config(provider), "127.0.0.1");
  reader.set_read_chunk_bytes(1 << 20);
  const RoutePair routes = resolve_each_other(reader, owner);
  constexpr uint32_t kLen = (3u << 20) + 5;  // four parts, the last one short
  TxBuffer payload(owner, kLen);
  for (size_t i = 0; i < kLen; i++) payload.bytes[i] = pattern_byte(i, 7);
  Exposure exposure;
  REQUIRE(owner.expose_for_read(RoutingInfo{}, payload.bytes.data(), kLen, payload.reg, exposure));
  TxBuffer mine(reader, kLen + 1);
  BulkAttack io{owner, reader, routes.to_b, {}};
  // No second completion for the same operation: drive a while and look.
  auto no_more_completions = [&] {
    std::array<BulkCompletion, 4> done{};
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
    size_t extra = 0;
    while (std::chrono::steady_clock::now() < until) {
      io.drive();
      extra += reader.poll_bulk(done);
    }
    return extra == 0;
  };
  // The whole exposure: one completion, every byte.
  CHECK(io.attempt(false, mine.bytes.data(), mine.reg, exposure.remote_addr, exposure.key, kLen));
  CHECK(std::memcmp(mine.bytes.data(), payload.bytes.data(), kLen) == 0);
  CHECK(no_more_completions());
  CHECK(reader.bulk_ops_in_flight() == 0);
  // One byte past the exposure: the last part is refused, so the whole
  // read fails, once.
  CHECK_FALSE(
      io.attempt(false, mine.bytes.data(), mine.reg, exposure.remote_addr, exposure.key, kLen + 1));
  CHECK(no_more_completions());
  CHECK(reader.bulk_ops_in_flight() == 0);
  owner.revoke_exposure(exposure);
}

TEST_CASE("over fabric, a datagram from another endpoint cannot reach a session", "[fabric]") {
  const std::string provider = GENERATE(from_range(providers_under_test()));
  INFO("provider " << provider);
  ConnectedPair p(fabric_config(provider));
  // When an intruder endpoint sends a well-formed request to session 0
  FabricTransport intruder(fabric_config(provider), "127.0.0.1");
  p.send_forged_request(intruder);
  // Expect it dropped and counted: as the wrong source where the provider
  // names senders; on shm, whose sources are not used, because request 0
  // is not a number the session expects (each starts at a random one)
  const RpcStats& s = p.server->stats();
  if (provider == "shm") {
    CHECK(s.drops.out_of_order == 1);
  } else {
    CHECK(s.drops.wrong_source == 1);
  }
  CHECK(s.handlers_run == 0);
  // and the real client unaffected
  CHECK(p.echo_ok(3000, 9));
}

TEST_CASE("over fabric, an intruder can neither write nor read beyond a live exposure",
          "[fabric]") {
  const std::string provider = GENERATE(from_range(bulk_providers()));
  INFO("provider " << provider);
  FabricTransport victim(fabric_config(provider), "127.0.0.1");
  FabricTransport intruder(fabric_config(provider), "127.0.0.1");
  const RoutePair routes = resolve_each_other(intruder, victim);
  BulkAttack{victim,
             intruder,
             routes.to_b,
             {},
             [&](const BulkOp& op) { return intruder.post_write_for_testing(op); }}
      .run();
  CHECK(victim.num_exposures() == 0);
}

TEST_CASE("over shm, large messages are read by tagged message", "[fabric]") {
  if (!shm_under_test()) return;
  // shm's own RMA cannot be trusted (docs/transports.md, "Bulk on shm"):
  // with virtual addressing it checks no keys; with offset addressing it
  // never answers an RMA it refuses. Reads go by tagged message instead,
  // checked and answered by the owner's transport.
  RpcConfig config = fabric_config("shm");
  config.rx_ring_size = 1024;
  FabricTransport t(config, "127.0.0.1");
  CHECK(t.caps().bulk);
  CHECK(t.tagged_reads());
  // The ring leaves room in shm's receive queue (1024) for tagged receives
  CHECK(t.caps().rx_ring_size < 1024);
  ConnectedPair p(config);
  CHECK(p.echo_ok(size_t{1} << 20, 7));
  CHECK(p.server->stats().bulk_reads == 1);
  CHECK(p.client->stats().bulk_reads == 1);
}

TEST_CASE("over shm, no bulk path where shm would not use cross-memory attach", "[fabric]") {
  if (!shm_under_test()) return;
  // shm's other protocol copies an answer from the owner's own progress,
  // which could go on after a revoke: large messages then go as datagrams
  ::setenv("FI_SHM_DISABLE_CMA", "1", 1);
  FabricTransport t(fabric_config("shm"), "127.0.0.1");
  ::unsetenv("FI_SHM_DISABLE_CMA");
  CHECK_FALSE(t.caps().bulk);
  CHECK_FALSE(t.tagged_reads());
  // A false spelling leaves it on
  ::setenv("FI_SHM_DISABLE_CMA", "no", 1);
  FabricTransport u(fabric_config("shm"), "127.0.0.1");
  ::unsetenv("FI_SHM_DISABLE_CMA");
  CHECK(u.caps().bulk);
}

namespace {

// A read by `reader` of an exposure at `owner` (a route of the reader's),
// driving only the endpoints given: true when it succeeded.
bool tagged_read(FabricTransport& reader, const RoutingInfo& to_owner, TxBuffer& into,
                 uint64_t offset, uint64_t key, uint32_t len,
                 std::initializer_list<FabricTransport*> driven, uint64_t cookie) {
  const BulkOp op{&to_owner, into.bytes.data(), into.reg.lkey, into.reg.desc, offset, key, len,
                  cookie};
  REQUIRE(reader.post_read(op));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  std::array<RxPacket, 32> rx{};
  std::array<BulkCompletion, 4> done{};
  while (std::chrono::steady_clock::now() < deadline) {
    for (FabricTransport* t : driven) {
      const size_t got = t->rx_burst(rx);
      if (got > 0) t->post_recvs(got);
    }
    const size_t n = reader.poll_bulk(done);
    for (size_t i = 0; i < n; i++) {
      if (done[i].cookie == cookie) return done[i].ok;
    }
  }
  FAIL("a tagged read neither completed nor failed within 10 s");
  return false;
}

// Over shm, an owner's payload exposed to a reader, as the engine exposes
// it (to the owner's resolved route to the reader).
struct ShmExposure {
  FabricTransport owner{fabric_config("shm"), "127.0.0.1"};
  FabricTransport reader{fabric_config("shm"), "127.0.0.1"};
  const RoutePair routes = resolve_each_other(reader, owner);
  TxBuffer payload;
  TxBuffer mine;  // the reader's
  Exposure exposure;
  uint64_t next_cookie = 1;

  explicit ShmExposure(uint32_t len) : payload(owner, len), mine(reader, len) {
    for (size_t i = 0; i < len; i++) payload.bytes[i] = pattern_byte(i, 9);
    REQUIRE(owner.expose_for_read(routes.to_a, payload.bytes.data(), len, payload.reg, exposure));
  }
  ~ShmExposure() { owner.revoke_exposure(exposure); }
  ShmExposure(const ShmExposure&) = delete;
  ShmExposure& operator=(const ShmExposure&) = delete;

  // The reader reads; both endpoints poll unless the owner is left out.
  bool read(uint64_t offset, uint64_t key, uint32_t len, bool owner_polls = true) {
    if (owner_polls) {
      return tagged_read(reader, routes.to_b, mine, offset, key, len, {&owner, &reader},
                         next_cookie++);
    }
    return tagged_read(reader, routes.to_b, mine, offset, key, len, {&reader}, next_cookie++);
  }
};

}  // namespace

TEST_CASE("over shm, a read request is served only from the bound reader and inside the exposure",
          "[fabric]") {
  if (!shm_under_test()) return;
  constexpr uint32_t kLen = 100'000;
  ShmExposure x(kLen);
  FabricTransport other(fabric_config("shm"), "127.0.0.1");  // a peer the owner knows too
  const RoutePair other_routes = resolve_each_other(other, x.owner);
  // Timeouts far away: every failure below is the owner's refusal
  x.reader.set_tagged_read_timeout_ms(60'000);
  other.set_tagged_read_timeout_ms(60'000);
  const uint64_t key = x.exposure.key;
  // The reader gets every byte, and a part of it
  CHECK(x.read(0, key, kLen));
  CHECK(std::memcmp(x.mine.bytes.data(), x.payload.bytes.data(), kLen) == 0);
  CHECK(x.read(4000, key, 96));
  CHECK(std::memcmp(x.mine.bytes.data(), x.payload.bytes.data() + 4000, 96) == 0);
  CHECK(x.owner.tagged_read_stats().served == 2);
  // Another peer of the owner's, with the right key: refused
  TxBuffer theirs(other, kLen);
  CHECK_FALSE(tagged_read(other, other_routes.to_b, theirs, 0, key, kLen, {&x.owner, &other}, 100));
  // Past the end, wrapping around, and a neighbouring key: refused
  CHECK_FALSE(x.read(1, key, kLen));
  CHECK_FALSE(x.read(UINT64_MAX - 10, key, 64));
  CHECK_FALSE(x.read(0, key ^ (uint64_t{1} << 30), 64));
  CHECK(x.owner.tagged_read_stats().served == 2);
  CHECK(x.owner.tagged_read_stats().refused == 4);
  // Once revoked, the reader's read is refused at once (not left to time out)
  x.owner.revoke_exposure(x.exposure);
  CHECK_FALSE(x.read(0, key, kLen));
  CHECK(x.owner.tagged_read_stats().refused == 5);
  CHECK(x.reader.tagged_read_stats().timed_out == 0);
  CHECK(x.owner.num_exposures() == 0);
}

TEST_CASE("over shm, an exposure is not served once its reader's address entry is gone",
          "[fabric]") {
  if (!shm_under_test()) return;
  ShmExposure x(8192);
  REQUIRE(x.read(0, x.exposure.key, 8192));
  // When the owner's last session to the reader lets go of its entry (shm
  // then names the reader's messages as whoever has entry 0, which was the
  // reader: the exposure must not be served on that word)
  x.owner.release_remote_routing_info(x.routes.to_a);
  x.reader.set_tagged_read_timeout_ms(100);
  CHECK_FALSE(x.read(0, x.exposure.key, 8192));
  CHECK(x.owner.tagged_read_stats().served == 1);
}

TEST_CASE("over shm, a late answer to a read that timed out reaches no later read", "[fabric]") {
  if (!shm_under_test()) return;
  ShmExposure x(64 << 10);
  REQUIRE(x.read(0, x.exposure.key, 64 << 10));  // shm has connected both ways
  // When the owner does not poll until the read has timed out, then answers
  x.reader.set_tagged_read_timeout_ms(50);
  CHECK_FALSE(x.read(0, x.exposure.key, 64 << 10, /*owner_polls=*/false));
  CHECK(x.reader.tagged_read_stats().timed_out == 1);
  std::array<RxPacket, 32> rx{};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (x.owner.tagged_read_stats().served < 2 && std::chrono::steady_clock::now() < deadline) {
    for (FabricTransport* t : {&x.owner, &x.reader}) {
      const size_t got = t->rx_burst(rx);
      if (got > 0) t->post_recvs(got);
    }
  }
  // Expect the late answer sent (shm keeps it as unexpected: its tag is
  // never posted again, docs/transports.md), the reader's receive gone
  CHECK(x.owner.tagged_read_stats().served == 2);
  CHECK(x.reader.tagged_receives_posted() == 0);
  // and a later read of other bytes gets its own, not the late answer
  std::fill(x.payload.bytes.begin(), x.payload.bytes.end(), uint8_t{0x5A});
  std::fill(x.mine.bytes.begin(), x.mine.bytes.end(), uint8_t{0});
  CHECK(x.read(0, x.exposure.key, 64 << 10));
  CHECK(std::all_of(x.mine.bytes.begin(), x.mine.bytes.end(), [](uint8_t b) { return b == 0x5A; }));
}

TEST_CASE("over shm, an owner that never polls holds up no read from another owner", "[fabric]") {
  if (!shm_under_test()) return;
  const RpcConfig config = fabric_config("shm");
  FabricTransport reader(config, "127.0.0.1");
  FabricTransport stuck(config, "127.0.0.1");  // never polls: shm takes no message for it
  FabricTransport owner(config, "127.0.0.1");
  const RoutePair to_stuck = resolve_each_other(reader, stuck);
  const RoutePair to_owner = resolve_each_other(reader, owner);
  TxBuffer payload(owner, 8192);
  Exposure exposure;
  REQUIRE(owner.expose_for_read(to_owner.to_a, payload.bytes.data(), 8192, payload.reg, exposure));
  reader.set_tagged_read_timeout_ms(60'000);
  TxBuffer mine(reader, 2 * 8192);
  // A read from the stuck owner first: its request cannot go, and waits
  const BulkOp stuck_op{&to_stuck.to_b,
                        mine.bytes.data() + 8192,
                        mine.reg.lkey,
                        mine.reg.desc,
                        0,
                        exposure.key,
                        64,
                        77};
  REQUIRE(reader.post_read(stuck_op));
  // Expect the other owner's read (its own first request waiting too, until
  // that owner polls) to complete all the same
  CHECK(tagged_read(reader, to_owner.to_b, mine, 0, exposure.key, 8192, {&owner, &reader}, 78));
  CHECK(std::memcmp(mine.bytes.data(), payload.bytes.data(), 8192) == 0);
  // When the reader lets go of the stuck owner, its read fails at once
  reader.release_remote_routing_info(to_stuck.to_b);
  std::array<BulkCompletion, 4> done{};
  std::array<RxPacket, 32> rx{};
  bool stuck_failed = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!stuck_failed && std::chrono::steady_clock::now() < deadline) {
    const size_t got = reader.rx_burst(rx);
    if (got > 0) reader.post_recvs(got);
    const size_t n = reader.poll_bulk(done);
    for (size_t i = 0; i < n; i++) stuck_failed |= done[i].cookie == 77 && !done[i].ok;
  }
  CHECK(stuck_failed);
  CHECK(reader.bulk_ops_in_flight() == 0);
  owner.revoke_exposure(exposure);
}

TEST_CASE("over shm, an owner answers one reader at most 32 parts it has not taken in",
          "[fabric]") {
  if (!shm_under_test()) return;
  constexpr uint32_t kPart = 8192;
  constexpr uint32_t kParts = 20;  // of each of two exposures: 40 in all
  ShmExposure x(kPart * kParts);
  TxBuffer second(x.owner, kPart * kParts);
  Exposure second_exposure;
  REQUIRE(x.owner.expose_for_read(x.routes.to_a, second.bytes.data(), kPart * kParts, second.reg,
                                  second_exposure));
  REQUIRE(x.read(0, x.exposure.key, 64));  // shm has connected both ways
  // When the reader asks for every part of both, then only the owner polls
  uint64_t cookie = 100;
  for (const Exposure* e : {&x.exposure, &second_exposure}) {
    for (uint32_t i = 0; i < kParts; i++) {
      const BulkOp op{&x.routes.to_b,
                      x.mine.bytes.data() + size_t{i} * kPart,
                      x.mine.reg.lkey,
                      x.mine.reg.desc,
                      uint64_t{i} * kPart,
                      e->key,
                      kPart,
                      cookie++};
      REQUIRE(x.reader.post_read(op));
    }
  }
  std::array<RxPacket, 32> rx{};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (x.owner.tagged_read_stats().served + x.owner.tagged_read_stats().refused < 41 &&
         std::chrono::steady_clock::now() < deadline) {
    const size_t got = x.owner.rx_burst(rx);
    if (got > 0) x.owner.post_recvs(got);
  }
  // Expect 32 answered and the other 8 refused
  CHECK(x.owner.tagged_read_stats().served == 1 + 32);
  CHECK(x.owner.tagged_read_stats().refused == 8);
  // and once the reader takes them in, all 40 complete: 32 ok, 8 failed
  size_t ok = 0, failed = 0;
  std::array<BulkCompletion, 16> done{};
  while (ok + failed < 40 && std::chrono::steady_clock::now() < deadline) {
    for (FabricTransport* t : {&x.owner, &x.reader}) {
      const size_t got = t->rx_burst(rx);
      if (got > 0) t->post_recvs(got);
    }
    const size_t n = x.reader.poll_bulk(done);
    for (size_t i = 0; i < n; i++) (done[i].ok ? ok : failed)++;
  }
  CHECK(ok == 32);
  CHECK(failed == 8);
  x.owner.revoke_exposure(second_exposure);
}

TEST_CASE("over shm, a malformed read request is dropped and counted", "[fabric]") {
  if (!shm_under_test()) return;
  ShmExposure x(4096);
  const TaggedReadRequest good{kTaggedReadMagic, 64, x.exposure.key, 0, kTaggedDataBit | 5};
  std::array<uint8_t, 48> bytes{};
  encode_tagged_read_request(good, bytes.data());
  std::vector<std::vector<uint8_t>> bad;
  bad.emplace_back(bytes.begin(), bytes.begin() + kTaggedReadRequestBytes - 1);  // short
  bad.emplace_back(bytes.begin(), bytes.end());                                  // long
  TaggedReadRequest no_magic = good;
  no_magic.magic ^= 1;
  TaggedReadRequest empty = good;
  empty.len = 0;
  TaggedReadRequest not_data_tag = good;
  not_data_tag.tag = 5;
  for (const TaggedReadRequest& r : {no_magic, empty, not_data_tag}) {
    std::vector<uint8_t> b(kTaggedReadRequestBytes);
    encode_tagged_read_request(r, b.data());
    bad.push_back(b);
  }
  bad.emplace_back(200, 0xAB);  // longer than a request buffer: truncated
  std::array<RxPacket, 32> rx{};
  auto owner_polls = [&] {
    const size_t got = x.owner.rx_burst(rx);
    if (got > 0) x.owner.post_recvs(got);
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (const auto& b : bad) {
    // (shm takes a first message to a peer once the peer has polled)
    while (!x.reader.send_read_request_for_testing(x.routes.to_b, b.data(), b.size()) &&
           std::chrono::steady_clock::now() < deadline) {
      owner_polls();
    }
  }
  while (x.owner.tagged_read_stats().malformed < bad.size() &&
         std::chrono::steady_clock::now() < deadline) {
    owner_polls();
  }
  // Each dropped and counted; nothing served or answered
  CHECK(x.owner.tagged_read_stats().malformed == bad.size());
  CHECK(x.owner.tagged_read_stats().served == 0);
  CHECK(x.owner.tagged_read_stats().refused == 0);
  // and the request buffers still take requests: a good one is served
  CHECK(x.read(0, x.exposure.key, 64));
}

TEST_CASE("over shm, a read nobody answers fails after its timeout", "[fabric]") {
  if (!shm_under_test()) return;
  ShmExposure x(8192);
  x.reader.set_tagged_read_timeout_ms(50);
  // The owner never polls (a peer that died, or hangs): only the reader runs
  const auto start = std::chrono::steady_clock::now();
  CHECK_FALSE(x.read(0, x.exposure.key, 8192, /*owner_polls=*/false));
  CHECK(std::chrono::steady_clock::now() - start >= std::chrono::milliseconds(50));
  CHECK(x.reader.tagged_read_stats().timed_out == 1);
  CHECK(x.reader.bulk_ops_in_flight() == 0);
}

TEST_CASE("over fabric, every exposure ends with its transfer", "[fabric]") {
  const std::string provider = GENERATE(from_range(bulk_providers()));
  INFO("provider " << provider);
  ConnectedPair p(fabric_config(provider));
  auto exposures = [](Rpc& rpc) {
    return static_cast<FabricTransport&>(impl_of(rpc).transport()).num_exposures();
  };
  REQUIRE(p.echo_ok(size_t{100} << 10, 3));
  // The client's request exposure ended with the request; the server's
  // response stays exposed until the slot's next request acknowledges it.
  CHECK(exposures(*p.client) == 0);
  CHECK(exposures(*p.server) == 1);
  for (int i = 0; i < 8; i++) REQUIRE(p.echo_ok(64, 4));
  CHECK(exposures(*p.server) == 0);
}

TEST_CASE("over fabric, a peer silent for 20 ms is not resent to: RDM endpoints lose nothing",
          "[fabric]") {
  const std::string provider = GENERATE(from_range(providers_under_test()));
  INFO("provider " << provider);
  // Given a session with round trips measured (default rto_us: 5 ms)
  ConnectedPair p(fabric_config(provider));
  for (int i = 0; i < 4; i++) REQUIRE(p.echo_ok(64, 7));
  // Expect its RTO at the transport's floor, far above rto_us
  CHECK(p.client->session_stats(p.sn)->rto_us >= FabricTransport::kMinRtoUs);
  // When a small request, and where there is a bulk path a large one read
  // by the server, wait 20 ms for a server that does not poll (as a
  // descheduled peer or one still reading an 8 MiB request would)
  for (const size_t size : {size_t{64}, size_t{1} << 20}) {
    INFO("size " << size);
    EchoCall call;
    REQUIRE(call.prepare(*p.client, size, size % 13));
    REQUIRE(call.enqueue(*p.client, p.sn, kEcho) == Errc::kOk);
    p.client->run_event_loop(std::chrono::milliseconds(20));
    REQUIRE(run_all_until({p.client.get(), p.server.get()}, [&] { return call.completions > 0; }));
    // Expect it answered without a resend (with the 5 ms floor, one went
    // out after 5 ms and another after 15)
    CHECK(call.echoed());
    call.release(*p.client);
  }
  CHECK(p.client->stats().retransmissions == 0);
  CHECK(p.server->stats().drops.busy == 0);
}

// Run by test/fabric/run_in_rxe_vm.sh with FI_MR_CACHE_MAX_COUNT set: a
// provider whose registration cache hands an exposure the cached
// registration of the whole region (verbs;ofi_rxm) gets no bulk path.
TEST_CASE("a registration cache that merges exposures with local registrations turns bulk off",
          "[.][mr_cache]") {
  const char* cache = std::getenv("FI_MR_CACHE_MAX_COUNT");
  REQUIRE(cache != nullptr);
  REQUIRE(std::string(cache) != "0");
  const std::string provider = providers_under_test().front();
  INFO("provider " << provider);
  RpcConfig config = fabric_config(provider);
  FabricTransport t(config, "127.0.0.1");
  CHECK_FALSE(t.caps().bulk);
  ConnectedPair p(config);
  CHECK(p.echo_ok(size_t{1} << 20, 7));  // as datagrams
  CHECK(p.server->stats().bulk_reads == 0);
}

TEST_CASE("over fabric, a large request cancelled mid-transfer ends once; the session carries on",
          "[fabric]") {
  const std::string provider = GENERATE(from_range(bulk_providers()));
  INFO("provider " << provider);
  ConnectedPair p(fabric_config(provider));
  auto exposures = [](Rpc& rpc) {
    return static_cast<FabricTransport&>(impl_of(rpc).transport()).num_exposures();
  };
  constexpr size_t kSize = size_t{1} << 20;
  // Cancelled after 0, 1, 2, ... loop iterations of both Rpcs: before the
  // server saw the control packet, while it reads the request, while the
  // handler answers, while the client reads the response. Nothing is
  // withdrawn under a read (a failed read breaks ofi_rxm's connection over
  // verbs, as the Soft-RoCE VM showed): the server reads and answers, and
  // the request ends then.
  for (int iterations : {0, 1, 2, 3, 4, 6, 8, 12, 16, 32}) {
    INFO("cancelled after " << iterations << " iterations");
    OwnedBuffer req(*p.client, kSize), resp(*p.client, kSize);
    REQUIRE(req.valid());
    REQUIRE(resp.valid());
    fill_pattern(req, static_cast<uint64_t>(iterations));
    int runs = 0;
    Errc errc = Errc::kOk;
    RequestId id;
    REQUIRE(p.client->enqueue_request(
                p.sn, kEcho, req, resp,
                [&](Rpc&, const Completion& c) {
                  runs++;
                  errc = c.errc;
                },
                {}, &id) == Errc::kOk);
    for (int i = 0; i < iterations; i++) {
      p.client->run_event_loop_once();
      p.server->run_event_loop_once();
    }
    const bool cancelled = p.client->cancel(id);
    REQUIRE(run_all_until({p.client.get(), p.server.get()}, [&] { return runs > 0; }));
    CHECK(runs == 1);
    CHECK(errc == (cancelled ? Errc::kCancelled : Errc::kOk));
    if (!cancelled) CHECK(check_pattern(resp, kSize, static_cast<uint64_t>(iterations)));
    CHECK(exposures(*p.client) == 0);  // nothing of the client stays readable
    // The session carries on.
    CHECK(p.echo_ok(size_t{64} << 10, 7));
  }
  CHECK(p.client->stats().bulk_paths_failed == 0);
  CHECK(p.server->stats().bulk_paths_failed == 0);
  CHECK(p.server->stats().bulk_reads_failed == 0);
  CHECK(p.client->stats().sessions_reset == 0);
}
