// Region header: written once by the creator, read once by the peer.
#include "transport/samehost/samehost_ring.h"

#include "wire/le.h"

namespace rpc::detail::samehost {

void init_region(uint8_t* base, const Geometry& g) {
  put_le64(base + kHeaderMagicOffset, kRegionMagic);
  put_le32(base + kHeaderVersionOffset, kRegionVersion);
  put_le32(base + kHeaderSlotBytesOffset, g.slot_bytes);
  put_le32(base + kHeaderEntriesOffset, g.entries);
  put_le64(base + kHeaderRegionBytesOffset, g.region_bytes());
}

bool read_region_header(const uint8_t* base, size_t region_bytes, uint32_t want_slot_bytes,
                        Geometry& out) {
  if (region_bytes < kPageBytes) return false;
  // One copy of the header line, then only the copy is looked at.
  uint8_t header[kCacheLineBytes];
  std::memcpy(header, base, sizeof header);
  if (get_le64(header + kHeaderMagicOffset) != kRegionMagic) return false;
  if (get_le32(header + kHeaderVersionOffset) != kRegionVersion) return false;
  Geometry g;
  g.slot_bytes = get_le32(header + kHeaderSlotBytesOffset);
  g.entries = get_le32(header + kHeaderEntriesOffset);
  if (!g.valid() || g.slot_bytes != want_slot_bytes) return false;
  if (get_le64(header + kHeaderRegionBytesOffset) != region_bytes) return false;
  if (g.region_bytes() != region_bytes) return false;
  out = g;
  return true;
}

}  // namespace rpc::detail::samehost
