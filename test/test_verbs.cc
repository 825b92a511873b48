// The verbs transport itself, on a real RDMA device (Soft-RoCE in the VM of
// scripts/rxe-vm.sh). Runs from test/verbs_main.cc, which skips without a
// device. The engine over verbs is covered by the [any_transport] cases.
#include <fmt/format.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "transport/verbs/verbs_transport.h"
#include "transport_test_util.h"

using namespace rpc;
using namespace rpc::detail;
using namespace rpc::test;

TEST_CASE("the verbs transport opens a device and sends datagrams within the port MTU", "[verbs]") {
  VerbsTransport a(verbs_config());
  VerbsTransport b(verbs_config());
  const TransportCaps caps = a.caps();
  CHECK(std::string(a.name()) == "verbs");
  CHECK_FALSE(a.device_name().empty());
  // mtu_bytes 0: the port's active MTU, one of the IB MTUs
  CHECK((caps.max_pkt_bytes == 256 || caps.max_pkt_bytes == 512 || caps.max_pkt_bytes == 1024 ||
         caps.max_pkt_bytes == 2048 || caps.max_pkt_bytes == 4096));
  // and a smaller mtu_bytes bounds it
  RpcConfig small = verbs_config();
  small.mtu_bytes = 300;
  CHECK(VerbsTransport(small).caps().max_pkt_bytes == 300);
  CHECK(caps.max_data_per_pkt == caps.max_pkt_bytes - kPktHeaderBytes);
  CHECK(caps.max_inline_bytes >= kPktHeaderBytes);
  CHECK(caps.bulk);  // RC READ (test_verbs_rc.cc)
  // A full-size datagram goes out zero copy, a bare header inlined; both
  // arrive whole with a's source key (QPN + GID from the GRH)
  check_datagrams_arrive(a, b);
}

TEST_CASE("after a send fails, later bursts still go out instead of waiting forever", "[verbs]") {
  VerbsTransport a(verbs_config());
  VerbsTransport b(verbs_config());
  const auto [to_b, to_a] = resolve_each_other(a, b);
  const TransportCaps caps = a.caps();
  TxBuffer buf(a, caps.max_pkt_bytes);
  // Given a send the device fails: a full-size datagram (not inlined) with
  // a key no registration has
  TxItem bad = buf.item(to_b, static_cast<uint32_t>(caps.max_data_per_pkt));
  bad.data_lkey = buf.reg.lkey + 1;
  a.tx_burst({&bad, 1});
  // When bursts follow that pass several signaled sends
  const std::vector<TxItem> burst(VerbsTransport::kMaxBatch, buf.item(to_b, 0));
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 16; i++) a.tx_burst(burst);
  // Expect them to return at once (each wait for a signaled send used to
  // skip failed completions, its own included, and spin forever), and the
  // failure counted
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(2));
  CHECK(a.tx_errors() > 0);
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

namespace {

// An IPv4 address on the RDMA device's netdev for one test: only inside the
// throw-away VM of scripts/rxe-vm.sh (RXE_IN_VM=1), never on a real host.
class NetdevAddress {
 public:
  NetdevAddress(const std::string& device, const std::string& cidr) : cidr_(cidr) {
    std::ifstream in(fmt::format("/sys/class/infiniband/{}/ports/1/gid_attrs/ndevs/0", device));
    REQUIRE(std::getline(in, netdev_));
    REQUIRE(run(fmt::format("ip addr add {} dev {}", cidr_, netdev_)));
  }
  // Waits until the GID table has dropped the address again, so that the
  // tests that follow do not pick a GID that vanishes under them.
  ~NetdevAddress() {
    run(fmt::format("ip addr del {} dev {}", cidr_, netdev_));
    RpcConfig config = verbs_config();
    for (int i = 0; i < 100 && VerbsTransport(config).gid_choice().index != 0; i++) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  NetdevAddress(const NetdevAddress&) = delete;
  NetdevAddress& operator=(const NetdevAddress&) = delete;

 private:
  static bool run(const std::string& cmd) { return std::system(cmd.c_str()) == 0; }
  std::string cidr_;
  std::string netdev_;
};

std::string gid_type_in_sysfs(const std::string& device, int index) {
  std::ifstream in(
      fmt::format("/sys/class/infiniband/{}/ports/1/gid_attrs/types/{}", device, index));
  std::string type;
  std::getline(in, type);
  return type;
}

}  // namespace

TEST_CASE("with no GID index given, the RoCEv2 GID of the Nexus's IPv4 address is chosen",
          "[verbs]") {
  if (std::getenv("RXE_IN_VM") == nullptr) {
    WARN("skipped: adds an address to the RDMA netdev, so runs only in scripts/rxe-vm.sh");
    return;
  }
  const RpcConfig config = verbs_config();  // verbs_gid_index -1
  std::string device;
  {
    // Given the VM's rxe0 on a netdev without an address: link-local GIDs only
    VerbsTransport t(config, "10.77.0.1");
    device = t.device_name();
    CHECK(t.gid_choice().index == 0);
    CHECK_THAT(t.gid_choice().reason, Catch::Contains("link-local only"));
  }
  // When the netdev gets 10.77.0.1 (the GID table follows within a moment)
  NetdevAddress address(device, "10.77.0.1/24");
  GidChoice choice;
  for (int i = 0; i < 50 && choice.reason.find("the Nexus's IP") == std::string::npos; i++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    choice = VerbsTransport(config, "10.77.0.1").gid_choice();
  }
  // Expect its RoCEv2 GID, not the RoCEv1 one rxe lists for the same address
  INFO(choice.reason);
  REQUIRE(choice.index > 0);
  CHECK(choice.reason ==
        fmt::format("RoCEv2 GID {} is ::ffff:10.77.0.1, the Nexus's IP", choice.index));
  CHECK(gid_type_in_sysfs(device, choice.index) == "RoCE v2");
  // With another Nexus IP, the one RoCEv2 GID with an address; a given index stays
  const GidChoice other = VerbsTransport(config, "10.77.0.99").gid_choice();
  CHECK(other.index == choice.index);
  CHECK_THAT(other.reason, Catch::StartsWith("no RoCEv2 GID is the Nexus's IP 10.77.0.99"));
  RpcConfig given = config;
  given.verbs_gid_index = 0;
  CHECK(VerbsTransport(given, "10.77.0.1").gid_choice().index == 0);

  // Datagrams over RoCEv2/IPv4 carry the sender's IPv4 address as its source
  VerbsTransport a(config, "10.77.0.1");
  VerbsTransport b(config, "10.77.0.1");
  check_datagrams_arrive(a, b);
  // Through an Rpc: the Nexus's address reaches the transport, which says what it chose
  ConnectedPair p(RpcConfig{.transport = "verbs"}, "10.77.0.1:0");
  CHECK(p.server->transport_provider() ==
        fmt::format("{} port 1, GID {}: {}", device, choice.index, choice.reason));
  CHECK(p.echo_ok(3000, 4));
}

TEST_CASE("a GID index below -1 is refused", "[verbs]") {
  RpcConfig c = verbs_config();
  c.verbs_gid_index = -2;
  CHECK_THROWS_WITH(VerbsTransport(c), Catch::Contains("below -1"));
}
