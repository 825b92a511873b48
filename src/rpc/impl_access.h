// The implementation behind a public Rpc or Nexus, for the library's own
// code and its tests (the public classes name this struct a friend; it is
// not part of the API users see).
#pragma once

#include "librpc/nexus.h"
#include "librpc/rpc.h"

namespace rpc::detail {

class RpcImpl;
class NexusImpl;

struct ImplAccess {
  static RpcImpl& of(Rpc& rpc) { return *rpc.impl_; }
  static NexusImpl& of(Nexus& nexus) { return *nexus.impl_; }
};

// Short form: impl_of(rpc), impl_of(nexus).
inline RpcImpl& impl_of(Rpc& rpc) { return ImplAccess::of(rpc); }
inline NexusImpl& impl_of(Nexus& nexus) { return ImplAccess::of(nexus); }

}  // namespace rpc::detail
