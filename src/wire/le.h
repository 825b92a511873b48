// Explicit little-endian fields for wire formats: the bytes are the same on
// every host, whatever its own byte order.
#pragma once

#include <cstddef>
#include <cstdint>

namespace rpc::detail {

inline void put_le16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
inline void put_le32(uint8_t* p, uint32_t v) {
  for (size_t i = 0; i < 4; i++) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline void put_le64(uint8_t* p, uint64_t v) {
  for (size_t i = 0; i < 8; i++) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline uint16_t get_le16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | p[1] << 8); }
inline uint32_t get_le32(const uint8_t* p) {
  uint32_t v = 0;
  for (size_t i = 0; i < 4; i++) v |= uint32_t{p[i]} << (8 * i);
  return v;
}
inline uint64_t get_le64(const uint8_t* p) {
  uint64_t v = 0;
  for (size_t i = 0; i < 8; i++) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

}  // namespace rpc::detail
