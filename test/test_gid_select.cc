// GID auto-selection (verbs_gid_index -1) on synthetic GID tables: no
// device needed. test_verbs.cc checks it against rxe's real table.
#include <arpa/inet.h>

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "transport/verbs/gid_select.h"

using namespace rpc::detail;

namespace {

GidEntry entry(uint32_t index, const std::string& ip6, GidType type) {
  GidEntry e{.index = index, .type = type, .present = true};
  REQUIRE(inet_pton(AF_INET6, ip6.c_str(), e.gid.data()) == 1);
  return e;
}

constexpr auto kV1 = GidType::kRoceV1;
constexpr auto kV2 = GidType::kRoceV2;

}  // namespace

TEST_CASE("the RoCEv2 GID of the Nexus's IPv4 address wins over other RoCEv2 GIDs", "[gid]") {
  // Given the table a RoCE NIC with two IPv4 addresses and a global IPv6 one has
  const std::vector<GidEntry> table = {
      entry(0, "fe80::1", kV1),         entry(1, "fe80::1", kV2),
      entry(2, "2001:db8::5", kV1),     entry(3, "2001:db8::5", kV2),
      entry(4, "::ffff:10.0.0.9", kV1), entry(5, "::ffff:10.0.0.9", kV2),
      entry(6, "::ffff:10.0.0.1", kV1), entry(7, "::ffff:10.0.0.1", kV2)};
  // Expect the RoCEv2 entry of the Nexus's address, and the reason to say so
  const GidChoice c = select_gid(table, "10.0.0.1");
  CHECK(c.index == 7);
  CHECK(c.reason == "RoCEv2 GID 7 is ::ffff:10.0.0.1, the Nexus's IP");
  CHECK(select_gid(table, "10.0.0.9").index == 5);
  // An IPv6 Nexus address matches the GID itself
  CHECK(select_gid(table, "2001:db8::5").index == 3);
}

TEST_CASE("a RoCEv1 GID with the Nexus's address is not chosen", "[gid]") {
  const std::vector<GidEntry> table = {entry(0, "fe80::1", kV2), entry(1, "::ffff:10.0.0.1", kV1)};
  const GidChoice c = select_gid(table, "10.0.0.1");
  CHECK(c.index == 0);
  CHECK_THAT(c.reason, Catch::Contains("link-local only"));
}

TEST_CASE("without a match, the first RoCEv2 GID with an address is chosen, IPv6 too", "[gid]") {
  const std::vector<GidEntry> table = {entry(0, "fe80::1", kV1), entry(1, "fe80::1", kV2),
                                       entry(2, "2001:db8::5", kV1), entry(3, "2001:db8::5", kV2),
                                       entry(5, "::ffff:10.0.0.9", kV2)};
  const GidChoice c = select_gid(table, "192.168.1.1");
  CHECK(c.index == 3);
  CHECK(c.reason ==
        "no RoCEv2 GID is the Nexus's IP 192.168.1.1; RoCEv2 GID 3 has an address, 2001:db8::5");
  // The Nexus's IP unknown or not an address: the same choice
  CHECK(select_gid(table, "").index == 3);
  CHECK(select_gid(table, "not-an-ip").index == 3);
}

TEST_CASE("absent and zero GIDs are never chosen", "[gid]") {
  GidEntry absent = entry(1, "::ffff:10.0.0.1", kV2);
  absent.present = false;
  const std::vector<GidEntry> table = {entry(0, "fe80::1", kV2), absent, entry(2, "::", kV2)};
  CHECK(select_gid(table, "10.0.0.1").index == 0);
}

TEST_CASE("link-local RoCEv2 GIDs only, an empty table or InfiniBand give GID 0", "[gid]") {
  // Given a netdev with no IP address (rxe on a dummy netdev, as in the test VM)
  const std::vector<GidEntry> link_local = {entry(0, "fe80::1", kV2), entry(1, "fe80::1", kV1)};
  CHECK(select_gid(link_local, "10.0.0.1").index == 0);

  const GidChoice empty = select_gid({}, "10.0.0.1");
  CHECK(empty.index == 0);
  CHECK_THAT(empty.reason, Catch::Contains("empty"));

  // InfiniBand: subnet-prefix GIDs of type IB, never RoCE
  const std::vector<GidEntry> ib = {entry(0, "fe80::2:c903:1:2345", GidType::kIb),
                                    entry(1, "2001:db8::1", GidType::kIb)};
  const GidChoice c = select_gid(ib, "10.0.0.1");
  CHECK(c.index == 0);
  CHECK_THAT(c.reason, Catch::Contains("no RoCEv2 GIDs"));
}

TEST_CASE("GIDs print as IPv6 addresses, IPv4-mapped ones with the IPv4 address", "[gid]") {
  CHECK(gid_to_string(entry(0, "::ffff:10.77.0.1", kV2).gid) == "::ffff:10.77.0.1");
  CHECK(gid_to_string(entry(0, "fe80::1", kV2).gid) == "fe80::1");
}
