// The key-value service's messages (docs/apps.md, "Wire format"): one
// request type per operation, little-endian length fields, every length
// checked against the message's size before anything is read (requests
// come from the network: a peer may send anything).
//
//   GET    request: u16 key_bytes | key
//          response: u8 status (kFound, kNotFound) | value
//   PUT    request: u16 key_bytes | u32 value_bytes | key | value
//          response: u8 status (kStored)
//   DELETE request: u16 key_bytes | key
//          response: u8 status (kDeleted, kNotFound)
//   INFO   request: empty
//          response: u16 partitions | u32 max_value_bytes
//
// A request the server cannot take is answered with an application error
// (Errc::kAppError, Completion::app_error = KvError).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "librpc/types.h"

namespace kv {

inline constexpr rpc::ReqType kGetReqType = 20;
inline constexpr rpc::ReqType kPutReqType = 21;
inline constexpr rpc::ReqType kDeleteReqType = 22;
inline constexpr rpc::ReqType kInfoReqType = 23;

// memcached's limits, so that one workload runs unchanged against both.
inline constexpr size_t kMaxKeyBytes = 250;
inline constexpr size_t kMaxValueBytes = size_t{1} << 20;

inline constexpr size_t kKeyLenBytes = 2;
inline constexpr size_t kValueLenBytes = 4;
inline constexpr size_t kGetHeaderBytes = kKeyLenBytes;
inline constexpr size_t kPutHeaderBytes = kKeyLenBytes + kValueLenBytes;
inline constexpr size_t kStatusBytes = 1;
inline constexpr size_t kInfoResponseBytes = 2 + 4;
// The largest request and response of the service.
inline constexpr size_t kMaxRequestBytes = kPutHeaderBytes + kMaxKeyBytes + kMaxValueBytes;
inline constexpr size_t kMaxResponseBytes = kStatusBytes + kMaxValueBytes;

enum class Status : uint8_t { kFound = 0, kNotFound = 1, kStored = 2, kDeleted = 3 };

// Completion::app_error of a refused request.
enum class KvError : uint32_t {
  kMalformed = 1,       // lengths disagree with the message size, or an empty key
  kTooLarge = 2,        // key above kMaxKeyBytes or value above kMaxValueBytes
  kWrongPartition = 3,  // the key belongs to another server Rpc (a client bug)
  kNoMemory = 4,        // the server could not allocate the response buffer
  kFull = 5,            // the partition's table is at its capacity (--capacity)
};
std::string_view to_string(KvError error);

// A decoded request; key and value point into the message.
struct Request {
  std::string_view key;
  std::span<const uint8_t> value;  // PUT only
};

// Decodes a GET or DELETE (same layout) or a PUT. nullopt, with *error
// set, when the message is malformed or too large.
std::optional<Request> decode_key_request(std::span<const uint8_t> msg, KvError* error);
std::optional<Request> decode_put_request(std::span<const uint8_t> msg, KvError* error);

// Encoders write into `out`, which must hold encoded_*_bytes(); they return
// the bytes written. REQUIRES: key.size() <= kMaxKeyBytes, value.size() <=
// kMaxValueBytes (checked by the client API before calling).
inline size_t encoded_key_request_bytes(std::string_view key) {
  return kGetHeaderBytes + key.size();
}
inline size_t encoded_put_request_bytes(std::string_view key, size_t value_bytes) {
  return kPutHeaderBytes + key.size() + value_bytes;
}
size_t encode_key_request(std::string_view key, uint8_t* out);
size_t encode_put_request(std::string_view key, std::span<const uint8_t> value, uint8_t* out);

struct Info {
  uint16_t partitions = 0;
  uint32_t max_value_bytes = 0;
};
void encode_info(const Info& info, uint8_t* out);
std::optional<Info> decode_info(std::span<const uint8_t> msg);

// The partition (server Rpc id) that owns `key` among `partitions`: FNV-1a,
// so every client and server agrees whatever their build.
uint64_t key_hash(std::string_view key);
inline uint16_t partition_of(std::string_view key, uint16_t partitions) {
  return static_cast<uint16_t>(key_hash(key) % partitions);
}

}  // namespace kv
