// A memory registration as the allocator (memory/) keeps it and the
// transports (transport/) make it.
#pragma once

#include <cstdint>

namespace rpc::detail {

// Registration of a memory region with the transport, for local use only:
// sends from it, receives and one-sided reads into it. Peers get no access
// to registered memory; what they may read is exposed per transfer (see
// Exposure in transport/transport.h).
struct MemReg {
  uint32_t lkey = 0;     // local key (verbs lkey; fabric, fake: region id)
  void* desc = nullptr;  // libfabric descriptor, verbs ibv_mr; unused elsewhere
};

}  // namespace rpc::detail
