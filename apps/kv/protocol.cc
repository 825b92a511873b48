#include "protocol.h"

#include <cstring>

namespace kv {

namespace {

uint16_t load_u16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | p[1] << 8); }
uint32_t load_u32(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}
void store_u16(uint16_t v, uint8_t* p) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
void store_u32(uint32_t v, uint8_t* p) {
  for (int i = 0; i < 4; i++) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

std::optional<Request> refuse(KvError reason, KvError* error) {
  *error = reason;
  return std::nullopt;
}

}  // namespace

std::string_view to_string(KvError error) {
  switch (error) {
    case KvError::kMalformed:
      return "malformed request";
    case KvError::kTooLarge:
      return "key or value too large";
    case KvError::kWrongPartition:
      return "key sent to the wrong partition";
    case KvError::kNoMemory:
      return "server out of message buffers";
    case KvError::kFull:
      return "server partition full";
  }
  return "unknown kv error";
}

std::optional<Request> decode_key_request(std::span<const uint8_t> msg, KvError* error) {
  if (msg.size() < kGetHeaderBytes) return refuse(KvError::kMalformed, error);
  const size_t key_bytes = load_u16(msg.data());
  if (key_bytes == 0 || msg.size() != kGetHeaderBytes + key_bytes) {
    return refuse(KvError::kMalformed, error);
  }
  if (key_bytes > kMaxKeyBytes) return refuse(KvError::kTooLarge, error);
  return Request{.key = {reinterpret_cast<const char*>(msg.data() + kGetHeaderBytes), key_bytes},
                 .value = {}};
}

std::optional<Request> decode_put_request(std::span<const uint8_t> msg, KvError* error) {
  if (msg.size() < kPutHeaderBytes) return refuse(KvError::kMalformed, error);
  const size_t key_bytes = load_u16(msg.data());
  const size_t value_bytes = load_u32(msg.data() + kKeyLenBytes);
  // Both lengths are bounded (16 and 32 bits), so the sum cannot wrap.
  if (key_bytes == 0 || msg.size() != kPutHeaderBytes + key_bytes + value_bytes) {
    return refuse(KvError::kMalformed, error);
  }
  if (key_bytes > kMaxKeyBytes || value_bytes > kMaxValueBytes) {
    return refuse(KvError::kTooLarge, error);
  }
  const uint8_t* key = msg.data() + kPutHeaderBytes;
  return Request{.key = {reinterpret_cast<const char*>(key), key_bytes},
                 .value = {key + key_bytes, value_bytes}};
}

size_t encode_key_request(std::string_view key, uint8_t* out) {
  store_u16(static_cast<uint16_t>(key.size()), out);
  std::memcpy(out + kGetHeaderBytes, key.data(), key.size());
  return kGetHeaderBytes + key.size();
}

size_t encode_put_request(std::string_view key, std::span<const uint8_t> value, uint8_t* out) {
  store_u16(static_cast<uint16_t>(key.size()), out);
  store_u32(static_cast<uint32_t>(value.size()), out + kKeyLenBytes);
  std::memcpy(out + kPutHeaderBytes, key.data(), key.size());
  if (!value.empty()) std::memcpy(out + kPutHeaderBytes + key.size(), value.data(), value.size());
  return kPutHeaderBytes + key.size() + value.size();
}

void encode_info(const Info& info, uint8_t* out) {
  store_u16(info.partitions, out);
  store_u32(info.max_value_bytes, out + 2);
}

std::optional<Info> decode_info(std::span<const uint8_t> msg) {
  if (msg.size() != kInfoResponseBytes) return std::nullopt;
  Info info{.partitions = load_u16(msg.data()), .max_value_bytes = load_u32(msg.data() + 2)};
  if (info.partitions == 0) return std::nullopt;
  return info;
}

uint64_t key_hash(std::string_view key) {
  uint64_t h = 14695981039346656037ull;  // FNV-1a 64-bit offset basis and prime
  for (const char c : key) {
    h ^= static_cast<uint8_t>(c);
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace kv
