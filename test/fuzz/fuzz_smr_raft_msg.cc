// libFuzzer target: apps/smr's raft message decoder (raft_codec.h), which
// reads requests from peer replicas. Whatever it accepts must re-encode to
// the same bytes (smr::fuzz_decode_roundtrip aborts otherwise); ASan
// catches reads past the input and leaks of what a refusal allocated.
#include <cstddef>
#include <cstdint>

#include "apps/smr/raft_codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  smr::fuzz_decode_roundtrip(data, size);
  return 0;
}
