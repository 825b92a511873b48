// The load generator's memcached side, over libmemcached (the C/C++ client
// library memcached users link): one connection per load thread, one
// request at a time (libmemcached's calls block until the reply).
#pragma once

#include "load.h"

namespace kv {

// Throws std::runtime_error when memcached cannot be reached.
LoadResult run_memcached_load(const LoadOptions& opt);

}  // namespace kv
