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
  w.bulk = VerbsBulkKind::kRc;
  w.rc.qpn = 0x12;
  w.rc.psn = 0xABCDEF;
  w.rc.peer_qpn = 0x13;
  return w;
}

VerbsRoutingWire valid_dc_offer() {
  VerbsRoutingWire w = valid_offer();
  w.bulk = VerbsBulkKind::kDc;
  w.dc.dct_num = 0x345;
  w.dc.set_key(0x0123456789ABCDEFull);
  return w;
}

}  // namespace

TEST_CASE("verbs routing info: the RC fields sit where the layout table says", "[unit]") {
  static_assert(offsetof(VerbsRoutingWire, layout) == 24);
  static_assert(offsetof(VerbsRoutingWire, rd_atomic) == 25);
  static_assert(offsetof(VerbsRoutingWire, bulk) == 26);
  static_assert(offsetof(VerbsRoutingWire, rc) == 28);
  static_assert(offsetof(VerbsRcFields, qpn) == 0);
  static_assert(offsetof(VerbsRcFields, psn) == 4);
  static_assert(offsetof(VerbsRcFields, peer_qpn) == 8);
  static_assert(offsetof(VerbsRoutingInfo, ah_index) == kVerbsRoutingWireBytes);
  const RoutingInfo info = encode(valid_offer());
  VerbsRoutingWire out;
  REQUIRE(parse_verbs_routing(info, out));
  CHECK(out.rc.qpn == 0x12);
  CHECK(out.rc.psn == 0xABCDEF);
  CHECK(out.rc.peer_qpn == 0x13);
  CHECK(out.rd_atomic == 16);
}

TEST_CASE("verbs routing info off the network is refused unless every field is in range",
          "[unit]") {
  VerbsRoutingWire out;
  // Datagram-only info (no bulk path) is valid with every bulk field zero.
  VerbsRoutingWire ud = valid_offer();
  ud.bulk = VerbsBulkKind::kNone;
  ud.rc.qpn = ud.rc.psn = ud.rc.peer_qpn = 0;
  ud.rd_atomic = 0;
  CHECK(parse_verbs_routing(encode(ud), out));
  ud.rc.psn = 1;  // a bulk field without a bulk kind
  CHECK_FALSE(parse_verbs_routing(encode(ud), out));

  auto refused = [&](auto mutate) {
    VerbsRoutingWire w = valid_offer();
    mutate(w);
    return !parse_verbs_routing(encode(w), out);
  };
  CHECK(refused([](VerbsRoutingWire& w) { w.magic ^= 1; }));
  CHECK(refused([](VerbsRoutingWire& w) { w.layout = 1; }));  // the UD-only layout
  CHECK(refused([](VerbsRoutingWire& w) { w.layout = 2; }));  // RC without a kind byte
  CHECK(refused([](VerbsRoutingWire& w) { w.bulk = static_cast<VerbsBulkKind>(3); }));
  CHECK(refused([](VerbsRoutingWire& w) { w.qpn = 0; }));
  CHECK(refused([](VerbsRoutingWire& w) { w.qpn = kMaxQpn + 1; }));
  CHECK(refused([](VerbsRoutingWire& w) { w.reserved = 1; }));
  CHECK(refused([](VerbsRoutingWire& w) { w.rc.qpn = 0; }));  // RC without its QP
  CHECK(refused([](VerbsRoutingWire& w) { w.rc.qpn = kMaxQpn + 1; }));
  CHECK(refused([](VerbsRoutingWire& w) { w.rc.psn = kMaxQpn + 1; }));
  CHECK(refused([](VerbsRoutingWire& w) { w.rc.peer_qpn = kMaxQpn + 1; }));
  CHECK(refused([](VerbsRoutingWire& w) { w.rd_atomic = 0; }));  // an RC QP that reads nothing
  CHECK(refused([](VerbsRoutingWire& w) {                        // RC fields under no kind
    w.bulk = VerbsBulkKind::kNone;
    w.rd_atomic = 0;
  }));
  // Bytes where resolve puts its indices must be zero on the wire.
  for (size_t i = kVerbsRoutingWireBytes; i < RoutingInfo::kMaxBytes; i++) {
    RoutingInfo info = encode(valid_offer());
    info.bytes[i] = 1;
    CHECK_FALSE(parse_verbs_routing(info, out));
  }
}

TEST_CASE("verbs routing info: the DC fields (target, access key) round-trip and are checked",
          "[unit]") {
  static_assert(offsetof(VerbsRoutingWire, dc) == 28);
  static_assert(offsetof(VerbsDcFields, dct_num) == 0);
  static_assert(offsetof(VerbsDcFields, key_lo) == 4);
  static_assert(offsetof(VerbsDcFields, key_hi) == 8);
  VerbsRoutingWire out;
  REQUIRE(parse_verbs_routing(encode(valid_dc_offer()), out));
  CHECK(out.bulk == VerbsBulkKind::kDc);
  CHECK(out.dc.dct_num == 0x345);
  CHECK(out.dc.key() == 0x0123456789ABCDEFull);
  // Any key is a key (it is random), but the target must be a QP number
  // and the peer must serve reads.
  VerbsRoutingWire w = valid_dc_offer();
  w.dc.set_key(~uint64_t{0});
  CHECK(parse_verbs_routing(encode(w), out));
  w.dc.set_key(0);
  CHECK(parse_verbs_routing(encode(w), out));
  w = valid_dc_offer();
  w.dc.dct_num = 0;
  CHECK_FALSE(parse_verbs_routing(encode(w), out));
  w.dc.dct_num = kMaxQpn + 1;
  CHECK_FALSE(parse_verbs_routing(encode(w), out));
  w = valid_dc_offer();
  w.rd_atomic = 0;
  CHECK_FALSE(parse_verbs_routing(encode(w), out));
}
