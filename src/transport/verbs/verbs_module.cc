// The entry point of librpc-verbs.so (transport/module.h): librpc loads this
// module the first time an Rpc asks for transport "verbs".
#include "rpc_build_config.h"
#include "transport/module.h"
#include "transport/verbs/verbs_transport.h"

RPC_DEFINE_TRANSPORT_MODULE("verbs", rpc::detail::VerbsTransport)
