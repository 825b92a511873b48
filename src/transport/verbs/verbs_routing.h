// Layout of the verbs transport's routing info inside RoutingInfo::bytes,
// and its validation. No ibverbs types: the unit tests and the fuzzers
// check the parser without an RDMA device.
//
//   off size field
//    0  16   gid          port GID (RoCE: the address; InfiniBand: subnet + GUID)
//   16   4   qpn          UD queue pair of the Rpc (its datagram address), 1..2^24-1
//   20   2   lid          port LID (InfiniBand; 0 on RoCE)
//   22   2   magic        kVerbsRoutingMagic: rejects info from another transport
//   24   1   layout       kVerbsRoutingLayout
//   25   1   rd_atomic    RDMA reads the sender's RC QPs serve at once (its
//                         max_qp_rd_atom, capped at 255); >= 1 with an RC QP
//   26   2   reserved     0
//   28   4   rc_qpn       RC queue pair for bulk reads: a client's offer in a
//                         connect request, the server's QP in the response;
//                         0 in the local routing info (datagrams only)
//   32   4   rc_psn       its first packet sequence number, < 2^24
//   36   4   rc_peer_qpn  request: the client's RC QP already connected to
//                         this server, 0 if none; response: the client QP the
//                         server's RC QP is connected to (rc_qpn's peer)
//   40   8   (resolved)   ah_index, rc_index: filled by resolve, 0 on the wire
//
// All fields in host byte order (little-endian on every supported machine).
#pragma once

#include <cstdint>
#include <cstring>

#include "transport/transport.h"

namespace rpc::detail {

inline constexpr uint16_t kVerbsRoutingMagic = 0x5642;  // "VB"
// 1: the UD-only layout of 24 bytes (before RC READ). 2: with the RC fields.
inline constexpr uint8_t kVerbsRoutingLayout = 2;
inline constexpr uint32_t kMaxQpn = 0xFFFFFF;  // QP numbers and PSNs are 24 bits
inline constexpr uint32_t kNoRcIndex = UINT32_MAX;

struct VerbsRoutingWire {
  uint8_t gid[16];
  uint32_t qpn;
  uint16_t lid;
  uint16_t magic;
  uint8_t layout;
  uint8_t rd_atomic;
  uint16_t reserved;
  uint32_t rc_qpn;
  uint32_t rc_psn;
  uint32_t rc_peer_qpn;
};
inline constexpr size_t kVerbsRoutingWireBytes = 40;
static_assert(sizeof(VerbsRoutingWire) == kVerbsRoutingWireBytes);

// Resolved routing info: the wire part plus the transport's indices.
struct VerbsRoutingInfo {
  VerbsRoutingWire wire;
  uint32_t ah_index;  // into the transport's address-handle table
  uint32_t rc_index;  // into its RC connection table; kNoRcIndex: datagrams only
};
static_assert(sizeof(VerbsRoutingInfo) == RoutingInfo::kMaxBytes);

inline VerbsRoutingInfo verbs_info_of(const RoutingInfo& info) {
  VerbsRoutingInfo v;
  std::memcpy(&v, info.bytes.data(), sizeof(v));
  return v;
}

// What an RC field set must satisfy, where one is present.
inline bool verbs_rc_fields_ok(const VerbsRoutingWire& w) {
  if (w.rc_qpn > kMaxQpn || w.rc_psn > kMaxQpn || w.rc_peer_qpn > kMaxQpn) return false;
  if (w.rc_qpn == 0) return w.rc_psn == 0 && w.rc_peer_qpn == 0 && w.rd_atomic == 0;
  return w.rd_atomic >= 1;
}

// Checks routing info that came off the network and copies its wire part
// to out. False for another transport's info, another layout, out-of-range
// numbers and any nonzero byte where the layout has none.
inline bool parse_verbs_routing(const RoutingInfo& info, VerbsRoutingWire& out) {
  std::memcpy(&out, info.bytes.data(), sizeof(out));
  if (out.magic != kVerbsRoutingMagic || out.layout != kVerbsRoutingLayout) return false;
  if (out.qpn == 0 || out.qpn > kMaxQpn || out.reserved != 0) return false;
  for (size_t i = kVerbsRoutingWireBytes; i < RoutingInfo::kMaxBytes; i++) {
    if (info.bytes[i] != 0) return false;
  }
  return verbs_rc_fields_ok(out);
}

}  // namespace rpc::detail
