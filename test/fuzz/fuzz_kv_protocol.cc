// libFuzzer target: the key-value service's request decoders
// (apps/kv/protocol.h), which run on whatever a client sends. The first
// input byte picks the decoder, the rest is the message. Whatever a decoder
// accepts must lie inside the message, within the limits, and re-encode to
// the same bytes.
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "apps/kv/protocol.h"
#include "fuzz_util.h"

namespace {

bool inside(std::span<const uint8_t> msg, const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  return n == 0 || (b >= msg.data() && b + n <= msg.data() + msg.size());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::span<const uint8_t> msg(data + 1, size - 1);
  kv::KvError error{};
  switch (data[0] % 3) {
    case 0:
      if (const auto req = kv::decode_key_request(msg, &error)) {
        FUZZ_CHECK(inside(msg, req->key.data(), req->key.size()));
        FUZZ_CHECK(!req->key.empty() && req->key.size() <= kv::kMaxKeyBytes);
        std::vector<uint8_t> again(kv::encoded_key_request_bytes(req->key));
        FUZZ_CHECK(kv::encode_key_request(req->key, again.data()) == msg.size());
        FUZZ_CHECK(std::memcmp(again.data(), msg.data(), msg.size()) == 0);
      } else {
        FUZZ_CHECK(error == kv::KvError::kMalformed || error == kv::KvError::kTooLarge);
      }
      break;
    case 1:
      if (const auto req = kv::decode_put_request(msg, &error)) {
        FUZZ_CHECK(inside(msg, req->key.data(), req->key.size()));
        FUZZ_CHECK(inside(msg, req->value.data(), req->value.size()));
        FUZZ_CHECK(!req->key.empty() && req->key.size() <= kv::kMaxKeyBytes);
        FUZZ_CHECK(req->value.size() <= kv::kMaxValueBytes);
        std::vector<uint8_t> again(kv::encoded_put_request_bytes(req->key, req->value.size()));
        FUZZ_CHECK(kv::encode_put_request(req->key, req->value, again.data()) == msg.size());
        FUZZ_CHECK(std::memcmp(again.data(), msg.data(), msg.size()) == 0);
      } else {
        FUZZ_CHECK(error == kv::KvError::kMalformed || error == kv::KvError::kTooLarge);
      }
      break;
    default:
      if (const auto info = kv::decode_info(msg)) {
        FUZZ_CHECK(info->partitions > 0 && msg.size() == kv::kInfoResponseBytes);
        uint8_t again[kv::kInfoResponseBytes];
        kv::encode_info(*info, again);
        FUZZ_CHECK(std::memcmp(again, msg.data(), msg.size()) == 0);
      }
      break;
  }
  return 0;
}
