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
//   25   1   rd_atomic    RDMA reads the sender serves at once (its
//                         max_qp_rd_atom, capped at 255); >= 1 with a bulk path
//   26   1   bulk         VerbsBulkKind: which of the two field sets below
//                         follows (0: none, datagrams only)
//   27   1   reserved     0
//  bulk = kRc (a QP per pair of Rpcs, verbs_rc.cc):
//   28   4   rc.qpn       RC queue pair for bulk reads: a client's offer in a
//                         connect request, the server's QP in the response
//   32   4   rc.psn       its first packet sequence number, < 2^24
//   36   4   rc.peer_qpn  request: the client's RC QP already connected to
//                         this server, 0 if none; response: the client QP the
//                         server's RC QP is connected to (rc.qpn's peer)
//  bulk = kDc (mlx5 Dynamically Connected transport, verbs_dc.cc):
//   28   4   dc.dct_num   the sender's DC target, 1..2^24-1
//   32   8   dc.key       its DC access key (random per Rpc), as two words
//  bulk = 0: bytes 28..39 are 0. The local routing info has no bulk part;
//  a connect request carries the client's, the response the server's.
//   40   8   (resolved)   ah_index, rc_index: filled by resolve, 0 on the wire
//
// All fields in host byte order (little-endian on every supported machine).
#pragma once

#include <cstdint>
#include <cstring>

#include "transport/transport.h"

namespace rpc::detail {

inline constexpr uint16_t kVerbsRoutingMagic = 0x5642;  // "VB"
// 1: the UD-only layout of 24 bytes (before RC READ). 2: with the RC
// fields. 3: a bulk kind byte, and the DC field set.
inline constexpr uint8_t kVerbsRoutingLayout = 3;
inline constexpr uint32_t kMaxQpn = 0xFFFFFF;  // QP numbers and PSNs are 24 bits
inline constexpr uint32_t kNoRcIndex = UINT32_MAX;

// The bulk path a routing info's fields describe (byte 26).
enum class VerbsBulkKind : uint8_t { kNone = 0, kRc = 1, kDc = 2 };

struct VerbsRcFields {
  uint32_t qpn;
  uint32_t psn;
  uint32_t peer_qpn;
};
struct VerbsDcFields {
  uint32_t dct_num;
  uint32_t key_lo;  // two words: the field set stays 12 bytes, 4-aligned
  uint32_t key_hi;
  uint64_t key() const { return uint64_t{key_hi} << 32 | key_lo; }
  void set_key(uint64_t k) {
    key_lo = static_cast<uint32_t>(k);
    key_hi = static_cast<uint32_t>(k >> 32);
  }
};

struct VerbsRoutingWire {
  uint8_t gid[16];
  uint32_t qpn;
  uint16_t lid;
  uint16_t magic;
  uint8_t layout;
  uint8_t rd_atomic;
  VerbsBulkKind bulk;
  uint8_t reserved;
  union {
    VerbsRcFields rc;  // bulk == kRc
    VerbsDcFields dc;  // bulk == kDc
  };
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

// What the bulk field set must satisfy: the one the kind names, in range,
// or none at all.
inline bool verbs_bulk_fields_ok(const VerbsRoutingWire& w) {
  switch (w.bulk) {
    case VerbsBulkKind::kNone:
      return w.rd_atomic == 0 && w.rc.qpn == 0 && w.rc.psn == 0 && w.rc.peer_qpn == 0;
    case VerbsBulkKind::kRc:
      return w.rd_atomic >= 1 && w.rc.qpn != 0 && w.rc.qpn <= kMaxQpn && w.rc.psn <= kMaxQpn &&
             w.rc.peer_qpn <= kMaxQpn;
    case VerbsBulkKind::kDc:
      return w.rd_atomic >= 1 && w.dc.dct_num != 0 && w.dc.dct_num <= kMaxQpn;
  }
  return false;  // a kind this layout does not know
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
  return verbs_bulk_fields_ok(out);
}

}  // namespace rpc::detail
