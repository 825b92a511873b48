// libFuzzer target: the read requests of the fabric transport's tagged reads
// over shm (src/transport/fabric/tagged_read.h). Any endpoint on the host
// can send one to an Rpc's endpoint; what the decoder accepts and the bounds
// check lets through decides which of our bytes a peer is sent.
//
// Input: 8 bytes of an exposure's length, then the request as it arrived
// (any length). Whatever is accepted must be a well-formed request, survive
// encoding unchanged, and lie inside the exposure exactly when the check
// says so.
#include <cstdint>
#include <cstring>

#include "fuzz_util.h"
#include "transport/fabric/tagged_read.h"

using namespace rpc::detail;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < sizeof(uint64_t)) return 0;
  uint64_t exposed_len;
  std::memcpy(&exposed_len, data, sizeof(exposed_len));
  const uint8_t* msg = data + sizeof(exposed_len);
  const size_t msg_len = size - sizeof(exposed_len);
  const auto req = decode_tagged_read_request(msg, msg_len);
  if (!req) return 0;
  FUZZ_CHECK(msg_len == kTaggedReadRequestBytes);
  FUZZ_CHECK(req->magic == kTaggedReadMagic && req->len > 0);
  FUZZ_CHECK((req->tag & kTaggedDataBit) != 0);
  FUZZ_CHECK(exposure_handle_of_key(req->key) <= kExposureHandleMask);
  uint8_t again[kTaggedReadRequestBytes];
  encode_tagged_read_request(*req, again);
  FUZZ_CHECK(std::memcmp(again, msg, kTaggedReadRequestBytes) == 0);
  // The bounds check against exact arithmetic: the part's end, computed
  // without wrapping, must not pass the exposure's.
  const unsigned __int128 end = static_cast<unsigned __int128>(req->offset) + req->len;
  const bool inside = end <= exposed_len;
  FUZZ_CHECK(tagged_read_within(req->offset, req->len, exposed_len) == inside);
  return 0;
}
