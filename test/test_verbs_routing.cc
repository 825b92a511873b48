// The verbs routing-info layout and its parser (verbs_routing.h): what a
// connect request or response may carry, checked without an RDMA device.
#include <catch2/catch.hpp>
#include <cstring>

#include "transport/verbs/verbs_routing.h"

using namespace rpc::detail;

namespace {

RoutingInfo encode(const VerbsRoutingWire& w) {
  RoutingInfo info;
  std::memcpy(info.bytes.data(), &w, sizeof(w));
  return info;
}

VerbsRoutingWire valid_offer() {
  VerbsRoutingWire w{};
  w.gid[15] = 1;
  w.qpn = 0x11;
  w.magic = kVerbsRoutingMagic;
  w.layout = kVerbsRoutingLayout;
  w.rd_atomic = 16;
  w.rc_qpn = 0x12;
  w.rc_psn = 0xABCDEF;
  w.rc_peer_qpn = 0x13;
  return w;
}

}  // namespace

TEST_CASE("verbs routing info: the RC fields sit where the layout table says", "[unit]") {
  static_assert(offsetof(VerbsRoutingWire, layout) == 24);
  static_assert(offsetof(VerbsRoutingWire, rd_atomic) == 25);
  static_assert(offsetof(VerbsRoutingWire, rc_qpn) == 28);
  static_assert(offsetof(VerbsRoutingWire, rc_psn) == 32);
  static_assert(offsetof(VerbsRoutingWire, rc_peer_qpn) == 36);
  static_assert(offsetof(VerbsRoutingInfo, ah_index) == kVerbsRoutingWireBytes);
  const RoutingInfo info = encode(valid_offer());
  VerbsRoutingWire out;
  REQUIRE(parse_verbs_routing(info, out));
  CHECK(out.rc_qpn == 0x12);
  CHECK(out.rc_psn == 0xABCDEF);
  CHECK(out.rc_peer_qpn == 0x13);
  CHECK(out.rd_atomic == 16);
}

TEST_CASE("verbs routing info off the network is refused unless every field is in range",
          "[unit]") {
  VerbsRoutingWire out;
  // Datagram-only info (no RC QP) is valid with every RC field zero.
  VerbsRoutingWire ud = valid_offer();
  ud.rc_qpn = ud.rc_psn = ud.rc_peer_qpn = 0;
  ud.rd_atomic = 0;
  CHECK(parse_verbs_routing(encode(ud), out));

  auto refused = [&](auto mutate) {
    VerbsRoutingWire w = valid_offer();
    mutate(w);
    return !parse_verbs_routing(encode(w), out);
  };
  CHECK(refused([](VerbsRoutingWire& w) { w.magic ^= 1; }));
  CHECK(refused([](VerbsRoutingWire& w) { w.layout = 1; }));  // the UD-only layout
  CHECK(refused([](VerbsRoutingWire& w) { w.qpn = 0; }));
  CHECK(refused([](VerbsRoutingWire& w) { w.qpn = kMaxQpn + 1; }));
  CHECK(refused([](VerbsRoutingWire& w) { w.reserved = 1; }));
  CHECK(refused([](VerbsRoutingWire& w) { w.rc_qpn = kMaxQpn + 1; }));
  CHECK(refused([](VerbsRoutingWire& w) { w.rc_psn = kMaxQpn + 1; }));
  CHECK(refused([](VerbsRoutingWire& w) { w.rc_peer_qpn = kMaxQpn + 1; }));
  CHECK(refused([](VerbsRoutingWire& w) { w.rd_atomic = 0; }));  // an RC QP that reads nothing
  CHECK(refused([](VerbsRoutingWire& w) {                        // RC fields without an RC QP
    w.rc_qpn = 0;
    w.rc_psn = 0;
    w.rc_peer_qpn = 0;
  }));
  // Bytes where resolve puts its indices must be zero on the wire.
  for (size_t i = kVerbsRoutingWireBytes; i < RoutingInfo::kMaxBytes; i++) {
    RoutingInfo info = encode(valid_offer());
    info.bytes[i] = 1;
    CHECK_FALSE(parse_verbs_routing(info, out));
  }
}
