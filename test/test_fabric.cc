// The fabric transport itself, with the libfabric providers that run on any
// Linux machine: tcp;ofi_rxm and shm (the same FI_EP_RDM calls as efa). The
// engine over fabric is covered by running the [any_transport] integration
// cases with LIBRPC_TEST_TRANSPORT=fabric (test/meson.build).
#include <catch2/catch.hpp>
#include <string>

#include "transport/fabric/fabric_transport.h"
#include "transport_test_util.h"

using namespace rpc;
using namespace rpc::detail;
using namespace rpc::test;

namespace {

RpcConfig fabric_config(const std::string& provider) {
  return RpcConfig{.transport = "fabric", .fabric_provider = provider, .rx_ring_size = 256};
}

}  // namespace

TEST_CASE("fabric endpoints exchange datagrams and name their source", "[fabric]") {
  const std::string provider = GENERATE("tcp;ofi_rxm", "shm");
  INFO("provider " << provider);
  FabricTransport a(fabric_config(provider), "127.0.0.1");
  FabricTransport b(fabric_config(provider), "127.0.0.1");
  CHECK(a.provider_name() == provider);
  // shm misreports unknown senders, so its sources are not used (the
  // "never resolved" case below shows why on a provider that does it right).
  CHECK(a.knows_sources() == (provider != "shm"));
  const TransportCaps caps = a.caps();
  CHECK(caps.max_pkt_bytes == RpcConfig{}.mtu_bytes);
  CHECK(caps.max_data_per_pkt == caps.max_pkt_bytes - kPktHeaderBytes);
  CHECK(caps.bulk);
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
  // Only tcp;ofi_rxm: shm (1.17) reports such a sender as the first peer in
  // its address vector, which is why the transport ignores shm's sources.
  const std::string provider = "tcp;ofi_rxm";
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

TEST_CASE("fabric routing info from another transport or with stray bytes is refused", "[fabric]") {
  FabricTransport a(fabric_config("tcp;ofi_rxm"), "127.0.0.1");
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

TEST_CASE("over fabric, large messages travel by one-sided read", "[fabric]") {
  const std::string provider = GENERATE("tcp;ofi_rxm", "shm");
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

TEST_CASE("over fabric, a datagram from another endpoint cannot reach a session", "[fabric]") {
  const std::string provider = GENERATE("tcp;ofi_rxm", "shm");
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
