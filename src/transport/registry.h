// Every transport librpc knows, in one table (transports.def): its name, the
// id that SM messages carry for it, and where its code lives. Built-in
// transports are compiled into librpc.so; the RDMA ones are modules
// (librpc-verbs.so, librpc-fabric.so) that an Rpc loads with dlopen the
// first time it asks for them, so that librpc.so itself never links
// libibverbs, libmlx5 or libfabric (docs/design.md, "Transport modules").
// Adding a transport touches the table and the transport's own folder.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "librpc/error.h"
#include "transport/transport.h"

namespace rpc {
struct RpcConfig;
}

namespace rpc::detail {

using BuiltInFactory = std::unique_ptr<Transport> (*)(const RpcConfig& config,
                                                      const std::string& bind_ip);

struct TransportEntry {
  std::string_view name;    // RpcConfig::transport
  uint8_t wire_id;          // in SM messages; assigned once, never reused
  BuiltInFactory built_in;  // nullptr: the transport is a module
  const char* module_file;  // the module's file name (modules only)
  bool module_built;        // this build of librpc made the module
  const char* build_needs;  // what building the module takes (modules only)
};

// The table, in the order the documentation lists transports.
std::span<const TransportEntry> transport_table();
// The entry named `name`; nullptr if there is none.
const TransportEntry* find_transport(std::string_view name);
// The wire id of the transport named `name`; 0 (never assigned) if unknown.
uint8_t transport_wire_id(std::string_view name);
// "udp, fake, verbs (module), fabric (module)".
std::string transport_names();

}  // namespace rpc::detail
