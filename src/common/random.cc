#include "common/random.h"

#include <sys/random.h>

#include <cerrno>
#include <cstring>

#include "common/log.h"

namespace rpc::detail {

uint64_t random_u64() {
  uint8_t bytes[sizeof(uint64_t)];
  size_t got = 0;
  while (got < sizeof(bytes)) {
    const ssize_t n = ::getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (n < 0 && errno == EINTR) continue;
    RPC_ASSERT(n > 0, "getrandom(2) failed: no source of unpredictable tokens");
    got += static_cast<size_t>(n);
  }
  uint64_t v;
  std::memcpy(&v, bytes, sizeof(v));
  return v;
}

}  // namespace rpc::detail
