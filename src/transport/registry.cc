// The transport table (registry.h) and the factory that uses it.
#include "transport/registry.h"

#include <array>

#include <fmt/format.h>

#include "rpc_build_config.h"
#include "transport/fake/fake_transport.h"
#include "transport/module_loader.h"
#include "transport/udp/udp_transport.h"

namespace rpc::detail {

namespace {

std::unique_ptr<Transport> make_udp(const RpcConfig& config, const std::string& bind_ip) {
  return std::make_unique<UdpTransport>(config, bind_ip);
}

std::unique_ptr<Transport> make_fake(const RpcConfig& config, const std::string&) {
  return std::make_unique<FakeTransport>(config);
}

// Wire ids are part of the SM wire format (docs/wire_format.md): assign a
// new transport the next free one and never reuse an id.
constexpr std::array<TransportEntry, 4> kTable{{
    {"udp", 1, &make_udp, nullptr, false, nullptr},
    {"fake", 2, &make_fake, nullptr, false, nullptr},
    {"verbs", 3, nullptr, "librpc-verbs.so", RPC_HAVE_VERBS, "libibverbs-dev (rdma-core)"},
    {"fabric", 4, nullptr, "librpc-fabric.so", RPC_HAVE_FABRIC, "libfabric-dev"},
}};

}  // namespace

std::span<const TransportEntry> transport_table() { return kTable; }

const TransportEntry* find_transport(std::string_view name) {
  for (const TransportEntry& e : kTable) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

uint8_t transport_wire_id(std::string_view name) {
  const TransportEntry* e = find_transport(name);
  return e != nullptr ? e->wire_id : 0;
}

std::string transport_names() {
  std::string names;
  for (const TransportEntry& e : kTable) {
    if (!names.empty()) names += ", ";
    names += e.name;
    if (e.built_in == nullptr) names += " (module)";
  }
  return names;
}

Result<std::unique_ptr<Transport>> make_transport(const RpcConfig& config,
                                                  const std::string& bind_ip) {
  const TransportEntry* entry = find_transport(config.transport);
  if (entry == nullptr) {
    return Failure{
        fmt::format("unknown transport '{}' (known: {})", config.transport, transport_names())};
  }
  if (entry->built_in != nullptr) {
    try {
      return entry->built_in(config, bind_ip);
    } catch (const std::exception& e) {
      return Failure{fmt::format("transport '{}': {}", config.transport, e.what())};
    }
  }
  auto module = load_transport_module(*entry);
  if (!module) return Failure{module.error()};
  std::string error;
  Transport* transport = nullptr;
  {
    const KeepSignalHandlers keep(fmt::format("transport '{}'", config.transport));
    transport = (*module)->create(config, bind_ip, error);
  }
  if (transport == nullptr) {
    return Failure{fmt::format("transport '{}': {}", config.transport, error)};
  }
  return std::unique_ptr<Transport>(transport);
}

}  // namespace rpc::detail
