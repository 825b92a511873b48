// Chooses the transport at run time by name.
#include <fmt/format.h>

#include "rpc_build_config.h"
#include "transport/fake/fake_transport.h"
#include "transport/transport.h"
#include "transport/udp/udp_transport.h"

namespace rpc::detail {

Result<std::unique_ptr<Transport>> make_transport(const RpcConfig& config,
                                                  const std::string& bind_ip) {
  try {
    if (config.transport == "udp") {
      return std::unique_ptr<Transport>(std::make_unique<UdpTransport>(config, bind_ip));
    }
    if (config.transport == "fake") {
      return std::unique_ptr<Transport>(std::make_unique<FakeTransport>(config));
    }
  } catch (const std::exception& e) {
    return Failure{fmt::format("transport '{}': {}", config.transport, e.what())};
  }
  if (config.transport == "verbs" || config.transport == "fabric") {
    return Failure{
        fmt::format("transport '{}' is not implemented in this build of librpc "
                    "(available: udp, fake)",
                    config.transport)};
  }
  return Failure{fmt::format("unknown transport '{}' (available: udp, fake)", config.transport)};
}

}  // namespace rpc::detail
