// The verbs transport itself, on a real RDMA device (Soft-RoCE in the VM of
// scripts/rxe-vm.sh). Runs from test/verbs_main.cc, which skips without a
// device. The engine over verbs is covered by the [any_transport] cases.
#include <catch2/catch.hpp>
#include <cstring>
#include <string>

#include "transport/verbs/verbs_transport.h"
#include "transport_test_util.h"

using namespace rpc;
using namespace rpc::detail;
using namespace rpc::test;

namespace {

RpcConfig verbs_config() { return RpcConfig{.transport = "verbs", .rx_ring_size = 256}; }

}  // namespace

TEST_CASE("the verbs transport opens a device and sends datagrams within the port MTU", "[verbs]") {
  VerbsTransport a(verbs_config());
  VerbsTransport b(verbs_config());
  const TransportCaps caps = a.caps();
  CHECK(std::string(a.name()) == "verbs");
  CHECK_FALSE(a.device_name().empty());
  CHECK(caps.max_pkt_bytes <= 4096);
  CHECK(caps.max_pkt_bytes <= RpcConfig{}.mtu_bytes);
  CHECK(caps.max_data_per_pkt == caps.max_pkt_bytes - kPktHeaderBytes);
  CHECK(caps.max_inline_bytes >= kPktHeaderBytes);
  CHECK(caps.bulk);  // RC READ (test_verbs_rc.cc)
  // A full-size datagram goes out zero copy, a bare header inlined; both
  // arrive whole with a's source key (QPN + GID from the GRH)
  check_datagrams_arrive(a, b);
}

TEST_CASE("verbs routing info from another transport or with stray bytes is refused", "[verbs]") {
  VerbsTransport a(verbs_config());
  RoutingInfo good;
  a.fill_local_routing_info(good);

  RoutingInfo bad_magic = good;
  bad_magic.bytes[22] ^= 0xFF;  // VerbsRoutingInfo::magic
  CHECK_FALSE(a.resolve_remote_routing_info(bad_magic));

  RoutingInfo no_qp = good;
  std::memset(no_qp.bytes.data() + 16, 0, 4);  // qpn 0
  CHECK_FALSE(a.resolve_remote_routing_info(no_qp));

  RoutingInfo stray = good;
  stray.bytes[44] = 1;  // where the resolved indices go
  CHECK_FALSE(a.resolve_remote_routing_info(stray));

  RoutingInfo udp_like{};  // what the udp transport sends
  CHECK_FALSE(a.resolve_remote_routing_info(udp_like));

  CHECK(a.resolve_remote_routing_info(good));
}

TEST_CASE("a port's address handle is destroyed when the last session to it releases it",
          "[verbs]") {
  // Handles are per remote port (GID, LID), shared by every queue pair
  // there: b and c, on the one device of the test VM, share one.
  VerbsTransport a(verbs_config());
  VerbsTransport b(verbs_config());
  VerbsTransport c(verbs_config());
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
  CHECK(a.num_remote_entries() == 1);
  // Expect the handle to stay while one session still uses it
  a.release_remote_routing_info(to_b1);
  a.release_remote_routing_info(to_c);
  CHECK(a.num_remote_entries() == 1);
  a.release_remote_routing_info(to_b2);
  CHECK(a.num_remote_entries() == 0);
  a.release_remote_routing_info(to_c);  // a stray release changes nothing
  CHECK(a.num_remote_entries() == 0);

  // When sessions keep coming and going
  for (int i = 0; i < 500; i++) {
    RoutingInfo x = i % 2 == 0 ? b_info : c_info;
    REQUIRE(a.resolve_remote_routing_info(x));
    a.release_remote_routing_info(x);
  }
  // Expect nothing left behind, and datagrams to flow after re-resolving
  CHECK(a.num_remote_entries() == 0);
  check_datagrams_arrive(a, b);
  CHECK(a.num_remote_entries() == 1);
}

TEST_CASE("a device that does not exist is named in the error", "[verbs]") {
  RpcConfig c = verbs_config();
  c.verbs_device = "no_such_rdma_dev";
  CHECK_THROWS_WITH(VerbsTransport(c), Catch::Contains("no_such_rdma_dev"));
  c.verbs_device.clear();
  c.verbs_gid_index = 100000;
  CHECK_THROWS_WITH(VerbsTransport(c), Catch::Contains("GID index 100000"));
}

TEST_CASE("over verbs, a datagram from another queue pair is dropped as the wrong source",
          "[verbs]") {
  ConnectedPair p(RpcConfig{.transport = "verbs"});
  CHECK(p.server->transport_name() == "verbs");
  // When an intruder (its own queue pair) sends a well-formed request to
  // the server's session 0
  VerbsTransport intruder(verbs_config());
  p.send_forged_request(intruder);
  // Expect it dropped and counted, and the real client unaffected
  CHECK(p.server->stats().drops.wrong_source == 1);
  CHECK(p.server->stats().handlers_run == 0);
  CHECK(p.echo_ok(3000, 9));
}
