// The interface between librpc and a transport module (librpc-verbs.so,
// librpc-fabric.so): one C entry point per ABI version that returns a
// description of the module and its factory. The rest of the interface is
// the C++ `Transport` class of transport.h and the types it takes
// (RpcConfig, TxItem, RxPacket, ...), so a module only works with the
// librpc it was built with: the loader refuses one whose ABI version or
// librpc version differs, with a message saying which.
#pragma once

#include <cstdint>
#include <string>

#include "transport/transport.h"

namespace rpc {
struct RpcConfig;
}

namespace rpc::detail {

// Bump when Transport, the types it takes or TransportModule change.
inline constexpr uint32_t kTransportModuleAbi = 1;

struct TransportModule {
  uint32_t abi;                // kTransportModuleAbi of the module's build
  const char* librpc_version;  // the librpc version it was built with
  const char* transport_name;  // the table's name, e.g. "verbs"
  // Creates the transport. Returns nullptr with `error` set on failure;
  // throws nothing.
  Transport* (*create)(const RpcConfig& config, const std::string& bind_ip, std::string& error);
};

}  // namespace rpc::detail

// The symbol every module exports; its name carries the ABI version, so a
// module of another ABI version is told apart before anything is called.
#define RPC_TRANSPORT_MODULE_ENTRY "librpc_transport_module_v1"
extern "C" {
using RpcTransportModuleEntry = const rpc::detail::TransportModule* (*)();
}

namespace rpc::detail {

// The factory a module puts in its TransportModule: constructs T, and turns
// what its constructor throws into `error` (exceptions do not cross the
// module boundary).
template <typename T>
Transport* create_module_transport(const RpcConfig& config, const std::string& bind_ip,
                                   std::string& error) {
  try {
    return new T(config, bind_ip);
  } catch (const std::exception& e) {
    error = e.what();
  } catch (...) {
    error = "an exception not derived from std::exception";
  }
  return nullptr;
}

}  // namespace rpc::detail

// Defines the module's entry point for transport class T named NAME.
#define RPC_DEFINE_TRANSPORT_MODULE(NAME, T)                                                    \
  extern "C" __attribute__((visibility("default"))) const rpc::detail::TransportModule*         \
  librpc_transport_module_v1() {                                                                \
    static const rpc::detail::TransportModule module{rpc::detail::kTransportModuleAbi,          \
                                                     RPC_VERSION, NAME,                         \
                                                     &rpc::detail::create_module_transport<T>}; \
    return &module;                                                                             \
  }
