// The load generator's librpc side: one Rpc and kv::Client per load thread,
// `outstanding` requests in flight each (closed loop: a completion sends
// the next request of that slot).
#pragma once

#include "../app_common.h"
#include "load.h"

namespace kv {

// Throws rpc::Error or std::runtime_error when the run cannot start
// (cannot connect, cannot allocate); request failures are counted.
LoadResult run_librpc_load(const LoadOptions& opt, const app::TransportOptions& transport,
                           const std::string& local_uri);

}  // namespace kv
