// The verbs transport itself, on a real RDMA device (Soft-RoCE in the VM of
// scripts/rxe-vm.sh). Runs from test/verbs_main.cc, which skips without a
// device. The engine over verbs is covered by the [any_transport] cases.
#include <array>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "rpc/rpc_impl.h"
#include "test_util.h"
#include "transport/verbs/verbs_transport.h"
#include "wire/pkt_hdr.h"

using namespace rpc;
using namespace rpc::detail;
using namespace rpc::test;

namespace {

NexusConfig local_nexus() { return NexusConfig{.uri = "127.0.0.1:0"}; }

void register_echo(Nexus& nexus) { REQUIRE(nexus.register_handler(kEcho, echo_into_response)); }

RpcConfig verbs_config() { return RpcConfig{.transport = "verbs", .rx_ring_size = 256}; }

// One registered buffer a test can send from.
struct TxBuffer {
  VerbsTransport& transport;
  std::vector<uint8_t> bytes;
  MemReg reg;

  TxBuffer(VerbsTransport& t, size_t size) : transport(t), bytes(size) {
    auto r = t.register_memory(bytes.data(), bytes.size());
    REQUIRE(r);
    reg = *r;
  }
  ~TxBuffer() { transport.deregister_memory(reg); }
};

// Polls `rx` until one datagram arrives (or 5 s pass).
bool receive_one(VerbsTransport& rx, RxPacket& out) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  std::array<RxPacket, VerbsTransport::kMaxBatch> pkts{};
  while (std::chrono::steady_clock::now() < deadline) {
    if (rx.rx_burst(pkts) > 0) {
      out = pkts[0];
      return true;
    }
  }
  return false;
}

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
  CHECK_FALSE(caps.bulk);

  RoutingInfo to_b;
  b.fill_local_routing_info(to_b);
  REQUIRE(a.resolve_remote_routing_info(to_b));

  // Given a full-size datagram (not inlined: it goes out zero-copy) and a
  // bare header (inlined)
  TxBuffer buf(a, caps.max_pkt_bytes);
  for (size_t i = 0; i < buf.bytes.size(); i++) buf.bytes[i] = pattern_byte(i, 5);
  for (uint32_t data_len : {static_cast<uint32_t>(caps.max_data_per_pkt), 0u}) {
    INFO("data_len " << data_len);
    const TxItem item{&to_b, buf.bytes.data(), buf.bytes.data() + kPktHeaderBytes, data_len,
                      buf.reg.lkey};
    a.tx_burst({&item, 1});
    // Expect it to arrive whole, with a source key that names a
    RxPacket pkt{};
    REQUIRE(receive_one(b, pkt));
    CHECK(pkt.len == kPktHeaderBytes + data_len);
    CHECK(std::memcmp(pkt.buf, buf.bytes.data(), pkt.len) == 0);
    RoutingInfo to_a;
    a.fill_local_routing_info(to_a);
    REQUIRE(b.resolve_remote_routing_info(to_a));
    CHECK(pkt.src_key == b.src_key_of(to_a));
    b.post_recvs(1);
  }
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
  stray.bytes[30] = 1;  // where the resolved address handle goes
  CHECK_FALSE(a.resolve_remote_routing_info(stray));

  RoutingInfo udp_like{};  // what the udp transport sends
  CHECK_FALSE(a.resolve_remote_routing_info(udp_like));

  CHECK(a.resolve_remote_routing_info(good));
}

TEST_CASE("a device that does not exist is named in the error", "[verbs]") {
  RpcConfig c = verbs_config();
  c.verbs_device = "no_such_rdma_dev";
  try {
    VerbsTransport t(c);
    FAIL("constructed a transport on a missing device");
  } catch (const Error& e) {
    CHECK_THAT(e.what(), Catch::Contains("no_such_rdma_dev"));
  }
  c.verbs_device.clear();
  c.verbs_gid_index = 100000;
  CHECK_THROWS_WITH(VerbsTransport(c), Catch::Contains("GID index 100000"));
}

TEST_CASE("over verbs, a datagram from another queue pair is dropped as the wrong source",
          "[verbs]") {
  Nexus nexus(local_nexus());
  register_echo(nexus);
  Rpc server(nexus, RpcConfig{.rpc_id = 1, .transport = "verbs"});
  Rpc client(nexus, RpcConfig{.rpc_id = 0, .transport = "verbs"});
  CHECK(std::string(server.transport_name()) == "verbs");
  auto sn = client.create_session(nexus.uri(), 1);
  REQUIRE(sn);
  REQUIRE(run_all_until({&client, &server}, [&] { return client.is_connected(*sn); }));

  // When an intruder (its own queue pair) sends a well-formed request to
  // the server's session 0
  VerbsTransport intruder(verbs_config());
  RoutingInfo to_server;
  server.impl().transport().fill_local_routing_info(to_server);
  REQUIRE(intruder.resolve_remote_routing_info(to_server));
  TxBuffer buf(intruder, 64);
  PktHdr::make(PktType::kReq, kEcho, 8, 0, 0, 0).store(buf.bytes.data());
  const TxItem item{&to_server, buf.bytes.data(), buf.bytes.data() + kPktHeaderBytes, 8,
                    buf.reg.lkey};
  intruder.tx_burst({&item, 1});
  // Expect it dropped and counted, and the real client unaffected
  REQUIRE(run_until(server, [&] { return server.stats().drops.wrong_source == 1; }));
  CHECK(server.stats().handlers_run == 0);
  EchoCall call;
  REQUIRE(call.prepare(client, 3000, 9));
  REQUIRE(call.enqueue(client, *sn, kEcho) == Errc::kOk);
  REQUIRE(run_all_until({&client, &server}, [&] { return call.completions > 0; }));
  CHECK(call.echoed());
  call.release(client);
}
