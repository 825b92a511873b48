// The payload of a bulk control packet (docs/wire_format.md, "Bulk
// control"): where the peer may read the message from, under which key.
// 24 bytes, little-endian:
//
//   off size field
//    0   8   addr       how the peer names the payload's first byte
//    8   8   key        the exposure's key (verbs rkey, libfabric MR key)
//   16   4   len        the message size, equal to the header's msg_size
//   20   4   reserved   zero; a packet with anything else is dropped
#pragma once

#include <cstddef>
#include <cstdint>

#include "wire/le.h"

namespace rpc::detail {

inline constexpr size_t kBulkCtrlBytes = 24;

struct BulkCtrl {
  uint64_t addr = 0;
  uint64_t key = 0;
  uint32_t len = 0;
  uint32_t reserved = 0;

  void store(uint8_t* out) const {
    put_le64(out, addr);
    put_le64(out + 8, key);
    put_le32(out + 16, len);
    put_le32(out + 20, reserved);
  }
  static BulkCtrl load(const uint8_t* in) {
    return BulkCtrl{get_le64(in), get_le64(in + 8), get_le32(in + 16), get_le32(in + 20)};
  }
};

}  // namespace rpc::detail
