// The server side of the key-value service: the request handlers and the
// per-Rpc partition they work on. A server runs one Rpc per thread, Rpc i
// owning partition i (kv::partition_of); each handler reaches its
// partition through ReqHandle::context(), so no two threads share a table.
#pragma once

#include <cstdint>

#include "librpc/rpc_all.h"
#include "table.h"

namespace kv {

struct Partition {
  Partition(uint16_t index_, uint16_t partitions_, size_t capacity_bytes)
      : index(index_), partitions(partitions_), table(capacity_bytes) {}
  uint16_t index;
  uint16_t partitions;
  Table table;
  // Requests refused (malformed, too large, wrong partition, full, no memory).
  uint64_t refused = 0;
};

// Registers the GET, PUT, DELETE and INFO handlers (foreground: the table
// operations take well under a microsecond). REQUIRES: before the first Rpc
// of `nexus`; every Rpc of it sets RpcConfig::context to its Partition.
rpc::Result<void> register_handlers(rpc::Nexus& nexus);

}  // namespace kv
