// Symbol visibility for librpc. The library is built with
// -fvisibility=hidden; only declarations marked RPC_EXPORT are exported.
#pragma once

#if defined(RPC_BUILDING_LIBRARY)
#define RPC_EXPORT __attribute__((visibility("default")))
#else
#define RPC_EXPORT
#endif
