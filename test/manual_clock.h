// A clock only the test moves, for Rpcs over `fake`
// (RpcImpl::set_clock_for_testing): RTOs, request timeouts and
// partial-request timeouts tested without sleeping.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

#include "common/clock.h"
#include "rpc/rpc_impl.h"

namespace rpc::test {

inline std::atomic<uint64_t> g_manual_ns{0};
inline uint64_t manual_clock() { return g_manual_ns.load(); }

// From here on `rpc` reads the manual clock. The first call starts it at
// now_ns(), so that timestamps taken before stay in the past.
inline void use_manual_clock(rpc::detail::RpcImpl& rpc, bool start_now = true) {
  if (start_now) g_manual_ns = rpc::detail::now_ns();
  rpc.set_clock_for_testing(manual_clock);
}

inline void advance_manual_clock(std::chrono::microseconds d) {
  g_manual_ns += static_cast<uint64_t>(d.count()) * 1000;
}

}  // namespace rpc::test
