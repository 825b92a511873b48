// Wire formats of the smr key-value service; see kv_proto.h.
#include "kv_proto.h"

#include "byte_io.h"

namespace smr {

namespace {
constexpr uint32_t kSnapshotMagic = 0x3153564b;  // "KVS1"
constexpr size_t kCommandHeaderBytes = 1 + 2 + 4;
}  // namespace

size_t command_size(const KvCommand& c) {
  // Padded to 8 bytes: raft_uv writes entry data unpadded but reads it back
  // as if padded to 8 (it asserts len % 8 == 0, in debug builds only), so
  // any other length corrupts its segments.
  const size_t n = kCommandHeaderBytes + c.key.size() + c.value.size();
  return (n + 7) / 8 * 8;
}

size_t encode_command(const KvCommand& c, uint8_t* out) {
  ByteWriter w(out);
  w.u8(static_cast<uint8_t>(c.op));
  w.u16(static_cast<uint16_t>(c.key.size()));
  w.u32(static_cast<uint32_t>(c.value.size()));
  w.bytes(c.key.data(), c.key.size());
  w.bytes(c.value.data(), c.value.size());
  while (static_cast<size_t>(w.pos() - out) % 8 != 0) w.u8(0);
  return static_cast<size_t>(w.pos() - out);
}

std::vector<uint8_t> encode_command(const KvCommand& c) {
  std::vector<uint8_t> out(command_size(c));
  encode_command(c, out.data());
  return out;
}

std::optional<KvCommand> decode_command(std::span<const uint8_t> bytes) {
  ByteReader r(bytes);
  KvCommand c;
  const uint8_t op = r.u8();
  const uint16_t key_len = r.u16();
  const uint32_t value_len = r.u32();
  if (!r.ok() || (op != 1 && op != 2)) return std::nullopt;
  c.op = static_cast<KvOp>(op);
  if (key_len > kMaxKeyBytes || value_len > kMaxValueBytes) return std::nullopt;
  if (c.op == KvOp::kGet && value_len != 0) return std::nullopt;
  c.key = r.str(key_len);
  c.value = r.str(value_len);
  // Then zeros up to a multiple of 8 bytes, no more.
  if (!r.ok() || bytes.size() % 8 != 0 || r.remaining() >= 8) return std::nullopt;
  while (r.remaining() > 0) {
    if (r.u8() != 0) return std::nullopt;
  }
  if (!r.at_end()) return std::nullopt;
  return c;
}

std::vector<uint8_t> encode_reply(const KvReply& rep) {
  const size_t addr_len = std::min<size_t>(rep.leader_address.size(), 255);
  std::vector<uint8_t> out(1 + 8 + 8 + 1 + 1 + 4 + addr_len + rep.value.size());
  ByteWriter w(out.data());
  w.u8(static_cast<uint8_t>(rep.status));
  w.u64(rep.leader_id);
  w.u64(rep.index);
  w.u8(rep.found ? 1 : 0);
  w.u8(static_cast<uint8_t>(addr_len));
  w.u32(static_cast<uint32_t>(rep.value.size()));
  w.bytes(rep.leader_address.data(), addr_len);
  w.bytes(rep.value.data(), rep.value.size());
  return out;
}

std::optional<KvReply> decode_reply(std::span<const uint8_t> bytes) {
  ByteReader r(bytes);
  KvReply rep;
  const uint8_t status = r.u8();
  rep.leader_id = r.u64();
  rep.index = r.u64();
  const uint8_t found = r.u8();
  const uint8_t addr_len = r.u8();
  const uint32_t value_len = r.u32();
  if (!r.ok() || status > static_cast<uint8_t>(KvStatus::kBusy) || found > 1 ||
      value_len > kMaxValueBytes) {
    return std::nullopt;
  }
  rep.status = static_cast<KvStatus>(status);
  rep.found = found == 1;
  rep.leader_address = r.str(addr_len);
  rep.value = r.str(value_len);
  if (!r.at_end()) return std::nullopt;
  return rep;
}

std::vector<uint8_t> encode_snapshot(const KvMap& map) {
  size_t size = 4 + 8;
  for (const auto& [k, v] : map) size += 2 + 4 + k.size() + v.size();
  std::vector<uint8_t> out(size);
  ByteWriter w(out.data());
  w.u32(kSnapshotMagic);
  w.u64(map.size());
  for (const auto& [k, v] : map) {
    w.u16(static_cast<uint16_t>(k.size()));
    w.u32(static_cast<uint32_t>(v.size()));
    w.bytes(k.data(), k.size());
    w.bytes(v.data(), v.size());
  }
  return out;
}

std::optional<KvMap> decode_snapshot(std::span<const uint8_t> bytes) {
  ByteReader r(bytes);
  if (r.u32() != kSnapshotMagic) return std::nullopt;
  const uint64_t count = r.u64();
  // Each pair takes at least 6 bytes: bound the count before reserving.
  if (!r.ok() || count > r.remaining() / 6) return std::nullopt;
  KvMap map;
  map.reserve(static_cast<size_t>(count));
  for (uint64_t i = 0; i < count; i++) {
    const uint16_t key_len = r.u16();
    const uint32_t value_len = r.u32();
    if (key_len > kMaxKeyBytes || value_len > kMaxValueBytes) return std::nullopt;
    std::string key(r.str(key_len));
    std::string value(r.str(value_len));
    if (!r.ok()) return std::nullopt;
    map[std::move(key)] = std::move(value);
  }
  if (!r.at_end()) return std::nullopt;
  return map;
}

}  // namespace smr
