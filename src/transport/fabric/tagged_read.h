// Reads over libfabric's shm provider, whose own RMA cannot be trusted
// (docs/transports.md, "Bulk on shm: reads by tagged message"). The reader
// posts a tagged receive for the part it wants, under a fresh random tag,
// and sends the owner of the exposure a read request naming the exposure's
// key, the part and the tag. The owner's transport checks the request
// against its own table of exposures and answers with one tagged send of
// exactly that part (shm moves it in one cross-memory-attach copy, as UCX
// does), or with an empty message under the tag: refused.
//
// This header is the request's wire format and the owner's check: pure
// functions over untrusted bytes, fuzzed (test/fuzz/fuzz_tagged_read.cc).
// Nothing of libfabric here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>

namespace rpc::detail {

// Tags: bit 63 set marks a reader's data receive (63 random bits under it);
// read requests travel under exactly kReadRequestTag.
inline constexpr uint64_t kTaggedDataBit = uint64_t{1} << 63;
inline constexpr uint64_t kReadRequestTag = 0x4c52504352514552;  // "REQRCPRL", bit 63 clear

inline constexpr uint32_t kTaggedReadMagic = 0x54524431;  // "1DRT"
inline constexpr size_t kTaggedReadRequestBytes = 32;

// Exposure keys: the exposure's handle in the low kExposureHandleBits, bit
// 63 set (never 0), random bits between (a peer cannot guess a key).
inline constexpr unsigned kExposureHandleBits = 20;
inline constexpr uint64_t kExposureHandleMask = (uint64_t{1} << kExposureHandleBits) - 1;

struct TaggedReadRequest {
  uint32_t magic = kTaggedReadMagic;
  uint32_t len = 0;     // bytes of the part
  uint64_t key = 0;     // the exposure's key
  uint64_t offset = 0;  // of the part, from the exposure's first byte
  uint64_t tag = 0;     // the reader's receive: kTaggedDataBit set
};
static_assert(sizeof(TaggedReadRequest) == kTaggedReadRequestBytes);

inline void encode_tagged_read_request(const TaggedReadRequest& req, uint8_t* out) {
  std::memcpy(out, &req, sizeof(req));
}

// A request as it arrived: exactly kTaggedReadRequestBytes, our magic, a
// part of at least one byte, a data tag. Anything else: nullopt.
inline std::optional<TaggedReadRequest> decode_tagged_read_request(const uint8_t* data,
                                                                   size_t len) {
  if (len != kTaggedReadRequestBytes) return std::nullopt;
  TaggedReadRequest req;
  std::memcpy(&req, data, sizeof(req));
  if (req.magic != kTaggedReadMagic || req.len == 0 || (req.tag & kTaggedDataBit) == 0) {
    return std::nullopt;
  }
  return req;
}

inline uint32_t exposure_handle_of_key(uint64_t key) {
  return static_cast<uint32_t>(key & kExposureHandleMask);
}

// True when [offset, offset + len) lies inside an exposure of exposed_len
// bytes (no wrap-around: offset is the peer's word).
inline bool tagged_read_within(uint64_t offset, uint32_t len, uint64_t exposed_len) {
  return offset <= exposed_len && len <= exposed_len - offset;
}

}  // namespace rpc::detail
