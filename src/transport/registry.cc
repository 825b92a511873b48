// The transport table (registry.h) and the factory that uses it.
#include "transport/registry.h"

#include <fmt/format.h>

#include <iterator>

#include "rpc_build_config.h"
#include "transport/fake/fake_transport.h"
#include "transport/module_loader.h"
#include "transport/samehost/samehost_transport.h"
#include "transport/udp/udp_transport.h"

namespace rpc::detail {

namespace {

std::unique_ptr<Transport> make_udp(const RpcConfig& config, const std::string& bind_ip) {
  return std::make_unique<UdpTransport>(config, bind_ip);
}

std::unique_ptr<Transport> make_fake(const RpcConfig& config, const std::string&) {
  return std::make_unique<FakeTransport>(config);
}

std::unique_ptr<Transport> make_samehost(const RpcConfig& config, const std::string&) {
  return std::make_unique<SamehostTransport>(config);
}

// RPC_MODULE_BUILT_<name>: set by the module's meson.build when this build
// made it.
#define RPC_BUILT_IN(name, wire_id, factory) {#name, wire_id, &factory, nullptr, false, nullptr},
#define RPC_MODULE(name, wire_id, build_needs) \
  {#name, wire_id, nullptr, "librpc-" #name ".so", RPC_MODULE_BUILT_##name, build_needs},
constexpr TransportEntry kTable[] = {
#include "transport/transports.def"
};
#undef RPC_BUILT_IN
#undef RPC_MODULE

// Names and wire ids identify a transport: each appears once.
constexpr bool table_is_unique() {
  for (size_t i = 0; i < std::size(kTable); i++) {
    for (size_t j = i + 1; j < std::size(kTable); j++) {
      if (kTable[i].name == kTable[j].name || kTable[i].wire_id == kTable[j].wire_id) return false;
    }
    if (kTable[i].wire_id == 0) return false;  // 0: unknown
  }
  return true;
}
static_assert(table_is_unique(), "transports.def: a name or wire id appears twice, or an id is 0");

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
