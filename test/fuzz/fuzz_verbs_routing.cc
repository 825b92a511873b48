// libFuzzer target: the verbs transport's routing-info parser
// (src/transport/verbs/verbs_routing.h), which every connect request and
// response from a peer passes before its QP numbers, PSNs, DC target and
// key reach ibv_modify_qp and mlx5dv_wr_set_dc_addr.
//
// Input: up to RoutingInfo::kMaxBytes bytes of routing info; missing bytes
// read as zero. Whatever the parser accepts must satisfy the layout's
// rules, and survive a copy back into routing info unchanged.
#include <cstdint>
#include <cstring>

#include "fuzz_util.h"
#include "transport/verbs/verbs_routing.h"

using namespace rpc::detail;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  RoutingInfo info{};
  std::memcpy(info.bytes.data(), data, std::min(size, RoutingInfo::kMaxBytes));
  VerbsRoutingWire w;
  if (!parse_verbs_routing(info, w)) return 0;
  FUZZ_CHECK(w.magic == kVerbsRoutingMagic && w.layout == kVerbsRoutingLayout);
  FUZZ_CHECK(w.qpn >= 1 && w.qpn <= kMaxQpn && w.reserved == 0);
  for (size_t i = kVerbsRoutingWireBytes; i < RoutingInfo::kMaxBytes; i++) {
    FUZZ_CHECK(info.bytes[i] == 0);
  }
  switch (w.bulk) {
    case VerbsBulkKind::kNone:
      FUZZ_CHECK(w.rd_atomic == 0 && w.rc.qpn == 0 && w.rc.psn == 0 && w.rc.peer_qpn == 0);
      break;
    case VerbsBulkKind::kRc:
      FUZZ_CHECK(w.rd_atomic >= 1 && w.rc.qpn >= 1 && w.rc.qpn <= kMaxQpn);
      FUZZ_CHECK(w.rc.psn <= kMaxQpn && w.rc.peer_qpn <= kMaxQpn);
      break;
    case VerbsBulkKind::kDc:
      FUZZ_CHECK(w.rd_atomic >= 1 && w.dc.dct_num >= 1 && w.dc.dct_num <= kMaxQpn);
      break;
    default:
      FUZZ_CHECK(!"a bulk kind the layout does not define was accepted");
  }
  RoutingInfo again{};
  std::memcpy(again.bytes.data(), &w, sizeof(w));
  FUZZ_CHECK(std::memcmp(again.bytes.data(), info.bytes.data(), RoutingInfo::kMaxBytes) == 0);
  VerbsRoutingWire w2;
  FUZZ_CHECK(parse_verbs_routing(again, w2));
  return 0;
}
