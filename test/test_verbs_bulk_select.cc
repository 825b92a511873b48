// RpcConfig::verbs_bulk on a real device (Soft-RoCE in the VM): which bulk
// path a verbs transport picks and why, DC refused where the device is not
// mlx5 (the DC path itself cannot run here: docs/transports.md), and the
// connect handshake between Rpcs whose bulk paths differ, which degrades
// to datagrams instead of failing the session.
#include <catch2/catch.hpp>
#include <cstring>
#include <vector>

#include "rpc_build_config.h"
#include "test_util.h"
#include "transport/verbs/verbs_transport.h"

using namespace rpc;
using namespace rpc::detail;
using namespace rpc::test;
using namespace std::chrono_literals;

namespace {

RpcConfig verbs_bulk_config(VerbsBulk mode) {
  return RpcConfig{.transport = "verbs", .verbs_bulk = mode, .rx_ring_size = 256};
}

VerbsRoutingWire wire_of(const RoutingInfo& info) { return verbs_info_of(info).wire; }

// Echoes of these sizes over one session from client to server; every one
// must come back byte for byte.
void echo_all(Rpc& client, SessionNum sn, const std::vector<size_t>& sizes) {
  std::vector<EchoCall> calls(sizes.size());
  size_t done = 0;
  for (size_t i = 0; i < calls.size(); i++) {
    calls[i].total_done = &done;
    REQUIRE(calls[i].prepare(client, sizes[i], 300 + i));
    REQUIRE(calls[i].enqueue(client, sn, kEcho) == Errc::kOk);
  }
  REQUIRE(run_until(
      client, [&] { return done == calls.size(); }, 120s));
  for (auto& c : calls) CHECK(c.echoed());
  for (auto& c : calls) c.release(client);
}

}  // namespace

TEST_CASE("verbs bulk auto picks RC on a device without DC, and says why", "[verbs]") {
  VerbsTransport t(verbs_bulk_config(VerbsBulk::kAuto));
  CHECK(t.bulk_kind() == VerbsBulkKind::kRc);
  CHECK(t.caps().bulk);
#if RPC_HAVE_MLX5DV
  CHECK_THAT(t.bulk_reason(), Catch::Contains("is not an mlx5 device"));
#else
  CHECK_THAT(t.bulk_reason(), Catch::Contains("built without mlx5dv"));
#endif
  VerbsTransport rc(verbs_bulk_config(VerbsBulk::kRc));
  CHECK(rc.bulk_kind() == VerbsBulkKind::kRc);
  VerbsTransport off(verbs_bulk_config(VerbsBulk::kOff));
  CHECK(off.bulk_kind() == VerbsBulkKind::kNone);
  CHECK_FALSE(off.caps().bulk);
}

TEST_CASE("verbs bulk dc on a device without DC is refused with the reason", "[verbs]") {
  CHECK_THROWS_WITH(VerbsTransport(verbs_bulk_config(VerbsBulk::kDc)),
                    Catch::Contains("verbs_bulk = dc, but") && Catch::Contains("use auto or rc"));
  // The Rpc constructor says the same.
  Nexus nexus(NexusConfig{.uri = "127.0.0.1:0"});
  CHECK_THROWS_WITH(Rpc(nexus, verbs_bulk_config(VerbsBulk::kDc)),
                    Catch::Contains("verbs_bulk = dc, but"));
}

TEST_CASE("verbs connect between Rpcs with different bulk paths falls back to datagrams",
          "[verbs]") {
  VerbsTransport rc(verbs_bulk_config(VerbsBulk::kRc));
  VerbsTransport off(verbs_bulk_config(VerbsBulk::kOff));

  // An RC offer to a server with bulk off: answered without a bulk path,
  // and the client lets its offer go.
  RoutingInfo offer;
  rc.fill_local_routing_info(offer);
  REQUIRE(rc.prepare_connect(offer, 5));
  CHECK(wire_of(offer).bulk == VerbsBulkKind::kRc);
  CHECK(rc.num_rc_qps() == 1);
  RoutingInfo at_server = offer;
  REQUIRE(off.resolve_remote_routing_info(at_server));
  CHECK(off.bulk_path_of(at_server) == 0);
  RoutingInfo answer;
  off.fill_connect_answer(at_server, answer);
  CHECK(wire_of(answer).bulk == VerbsBulkKind::kNone);
  REQUIRE(rc.resolve_connect_answer(answer, offer));
  CHECK(rc.bulk_path_of(answer) == 0);
  CHECK(rc.num_rc_qps() == 0);

  // A DC offer to a server that uses RC: datagrams only as well.
  RoutingInfo dc_offer;
  rc.fill_local_routing_info(dc_offer);
  VerbsRoutingWire w = wire_of(dc_offer);
  w.bulk = VerbsBulkKind::kDc;
  w.rd_atomic = 16;
  w.dc.dct_num = 0x1234;
  w.dc.set_key(0xfeedface);
  std::memcpy(dc_offer.bytes.data(), &w, sizeof(w));
  RoutingInfo dc_at_server = dc_offer;
  REQUIRE(rc.resolve_remote_routing_info(dc_at_server));
  CHECK(rc.bulk_path_of(dc_at_server) == 0);
  RoutingInfo dc_answer;
  rc.fill_connect_answer(dc_at_server, dc_answer);
  CHECK(wire_of(dc_answer).bulk == VerbsBulkKind::kNone);

  // A client that offered nothing takes no bulk path from the answer.
  RoutingInfo plain;
  off.fill_local_routing_info(plain);
  REQUIRE(off.prepare_connect(plain, 6));
  CHECK(wire_of(plain).bulk == VerbsBulkKind::kNone);
  RoutingInfo rc_offer;
  rc.fill_local_routing_info(rc_offer);
  REQUIRE(rc.prepare_connect(rc_offer, 7));
  RoutingInfo forged = rc_offer;  // RC fields where none were asked for
  CHECK_FALSE(off.resolve_connect_answer(forged, plain));
  rc.cancel_connect(rc_offer);

  off.release_remote_routing_info(at_server);
  rc.release_remote_routing_info(answer);
  rc.release_remote_routing_info(dc_at_server);
  CHECK(rc.num_rc_qps() == 0);
}

TEST_CASE("over verbs, bulk off at either end: large messages go as datagrams, byte for byte",
          "[verbs]") {
  Nexus nexus(NexusConfig{.uri = "127.0.0.1:0"});
  REQUIRE(nexus.register_handler(kEcho, echo_into_response));
  const std::vector<size_t> sizes{16385, 200000, size_t{1} << 20};
  for (const bool client_off : {true, false}) {
    DYNAMIC_SECTION((client_off ? "client off, server auto" : "client auto, server off")) {
      RpcConfig server_config = verbs_bulk_config(client_off ? VerbsBulk::kAuto : VerbsBulk::kOff);
      server_config.rpc_id = 1;
      ServerThread server(nexus, server_config);
      RpcConfig client_config = verbs_bulk_config(client_off ? VerbsBulk::kOff : VerbsBulk::kAuto);
      Rpc client(nexus, client_config);
      auto sn = client.create_session(nexus.uri(), 1);
      REQUIRE(sn);
      REQUIRE(run_until(client, [&] { return client.is_connected(*sn); }));
      echo_all(client, *sn, sizes);
      CHECK(client.stats().bulk_reads == 0);
      server.stop();
      CHECK(server.final_stats().bulk_reads == 0);
    }
  }
}
