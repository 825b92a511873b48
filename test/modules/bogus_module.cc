// Transport modules that librpc must refuse, one per way a module can be
// wrong, built from this file with a different macro each
// (test/meson.build): BOGUS_ABI (another ABI version), BOGUS_VERSION
// (another librpc version), BOGUS_NAME (the module of another transport),
// BOGUS_NO_ENTRY (no entry point at all). test_modules.cc loads them.
#include "rpc_build_config.h"
#include "transport/module.h"

#ifndef BOGUS_NO_ENTRY
namespace {

rpc::detail::Transport* never_create(const rpc::RpcConfig&, const std::string&,
                                     std::string& error) {
  error = "a bogus test module cannot create transports";
  return nullptr;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) const rpc::detail::TransportModule*
librpc_transport_module_v1() {
  static const rpc::detail::TransportModule module{
#ifdef BOGUS_ABI
      rpc::detail::kTransportModuleAbi + 998,
#else
      rpc::detail::kTransportModuleAbi,
#endif
#ifdef BOGUS_VERSION
      "0.0.0-other",
#else
      RPC_VERSION,
#endif
#ifdef BOGUS_NAME
      "other",
#else
      "fabric",
#endif
      &never_create};
  return &module;
}
#else
// A shared object with some other symbol: what a stray file of the right
// name would be.
extern "C" __attribute__((visibility("default"))) int not_a_transport_module() { return 0; }
#endif
