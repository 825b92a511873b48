// rpc::library_version(): the version this librpc.so was built as.
#include "librpc/version.h"

#include "rpc_build_config.h"

namespace rpc {

const char* library_version() noexcept { return RPC_VERSION; }

}  // namespace rpc
