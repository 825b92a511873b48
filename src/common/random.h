// Unpredictable 64-bit values from the kernel's CSPRNG, for everything a
// peer must not guess: connect tokens (the disconnect credential and the
// first request number), Nexus incarnations, probe nonces.
#pragma once

#include <cstdint>

namespace rpc::detail {

// 64 bits from getrandom(2) (the urandom pool; blocks only before the
// pool is first initialised at boot). Thread-safe. Never fails: getrandom
// cannot fail on Linux >= 3.17, and if it ever did, this aborts with a
// message rather than hand out a guessable value.
uint64_t random_u64();

}  // namespace rpc::detail
