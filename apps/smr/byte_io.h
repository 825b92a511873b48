// Little-endian writer and bounds-checked reader for the smr wire formats
// (raft messages, client commands, snapshots). The reader never reads past
// its span: every get fails (and stays failed) once the input runs out.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

namespace smr {

class ByteWriter {
 public:
  explicit ByteWriter(uint8_t* out) : p_(out) {}
  void u8(uint8_t v) { *p_++ = v; }
  void u16(uint16_t v) { le(v, 2); }
  void u32(uint32_t v) { le(v, 4); }
  void u64(uint64_t v) { le(v, 8); }
  void bytes(const void* src, size_t n) {
    if (n != 0) std::memcpy(p_, src, n);
    p_ += n;
  }
  uint8_t* pos() const { return p_; }

 private:
  void le(uint64_t v, int n) {
    for (int i = 0; i < n; i++) *p_++ = static_cast<uint8_t>(v >> (8 * i));
  }
  uint8_t* p_;
};

class ByteReader {
 public:
  explicit ByteReader(std::span<const uint8_t> in) : in_(in) {}
  bool ok() const { return ok_; }
  size_t remaining() const { return ok_ ? in_.size() - off_ : 0; }
  bool at_end() const { return ok_ && off_ == in_.size(); }
  uint8_t u8() { return static_cast<uint8_t>(le(1)); }
  uint16_t u16() { return static_cast<uint16_t>(le(2)); }
  uint32_t u32() { return static_cast<uint32_t>(le(4)); }
  uint64_t u64() { return le(8); }
  // A view of the next n bytes (empty and failed when fewer remain).
  std::span<const uint8_t> bytes(size_t n) {
    if (!take(n)) return {};
    return in_.subspan(off_ - n, n);
  }
  std::string_view str(size_t n) {
    auto b = bytes(n);
    return {reinterpret_cast<const char*>(b.data()), b.size()};
  }
  void fail() { ok_ = false; }

 private:
  bool take(size_t n) {
    if (!ok_ || in_.size() - off_ < n) {
      ok_ = false;
      return false;
    }
    off_ += n;
    return true;
  }
  uint64_t le(int n) {
    if (!take(static_cast<size_t>(n))) return 0;
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
      v |= uint64_t{in_[off_ - static_cast<size_t>(n) + static_cast<size_t>(i)]} << (8 * i);
    return v;
  }
  std::span<const uint8_t> in_;
  size_t off_ = 0;
  bool ok_ = true;
};

}  // namespace smr
