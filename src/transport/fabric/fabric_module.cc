// The entry point of librpc-fabric.so (transport/module.h): librpc loads this
// module the first time an Rpc asks for transport "fabric".
#include "rpc_build_config.h"
#include "transport/fabric/fabric_transport.h"
#include "transport/module.h"

RPC_DEFINE_TRANSPORT_MODULE("fabric", rpc::detail::FabricTransport)
