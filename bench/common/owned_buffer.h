// Allocation that fails a benchmark run with the reason, as an
// rpc::OwnedBuffer (freed when the scope ends, so an exception cannot leak
// it).
#pragma once

#include <fmt/core.h>

#include <cstddef>

#include "common/args.h"
#include "librpc/rpc_all.h"

namespace bench {

// Throws RunError when the Rpc cannot allocate max_size bytes.
inline rpc::OwnedBuffer alloc_or_throw(rpc::Rpc& rpc, std::size_t max_size) {
  rpc::OwnedBuffer buf(rpc, max_size);
  if (!buf.valid()) {
    throw RunError(fmt::format("cannot allocate a {}-byte message buffer (largest: {} B)", max_size,
                               rpc.max_msg_size()));
  }
  return buf;
}

}  // namespace bench
