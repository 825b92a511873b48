// Chooses the transport at run time by name.
#include <fmt/format.h>

#include "rpc_build_config.h"
#include "transport/fake/fake_transport.h"
#include "transport/transport.h"
#include "transport/udp/udp_transport.h"
#if RPC_HAVE_VERBS
#include "transport/verbs/verbs_transport.h"
#endif
#if RPC_HAVE_FABRIC
#include "transport/fabric/fabric_transport.h"
#endif

namespace rpc::detail {

namespace {
constexpr const char* kAvailable = RPC_HAVE_VERBS && RPC_HAVE_FABRIC ? "udp, fake, verbs, fabric"
                                   : RPC_HAVE_VERBS                  ? "udp, fake, verbs"
                                   : RPC_HAVE_FABRIC                 ? "udp, fake, fabric"
                                                                     : "udp, fake";
}  // namespace

Result<std::unique_ptr<Transport>> make_transport(const RpcConfig& config,
                                                  const std::string& bind_ip) {
  try {
    if (config.transport == "udp") {
      return std::unique_ptr<Transport>(std::make_unique<UdpTransport>(config, bind_ip));
    }
    if (config.transport == "fake") {
      return std::unique_ptr<Transport>(std::make_unique<FakeTransport>(config));
    }
#if RPC_HAVE_VERBS
    if (config.transport == "verbs") {
      return std::unique_ptr<Transport>(std::make_unique<VerbsTransport>(config, bind_ip));
    }
#endif
#if RPC_HAVE_FABRIC
    if (config.transport == "fabric") {
      return std::unique_ptr<Transport>(std::make_unique<FabricTransport>(config, bind_ip));
    }
#endif
  } catch (const std::exception& e) {
    return Failure{fmt::format("transport '{}': {}", config.transport, e.what())};
  }
  if (config.transport == "verbs" || config.transport == "fabric") {
    return Failure{
        fmt::format("transport '{}' is not available in this build of librpc (available: {}){}",
                    config.transport, kAvailable,
                    config.transport == "verbs" ? "; rebuild with libibverbs-dev installed"
                                                : "; rebuild with libfabric-dev installed")};
  }
  return Failure{
      fmt::format("unknown transport '{}' (available: {})", config.transport, kAvailable)};
}

}  // namespace rpc::detail
