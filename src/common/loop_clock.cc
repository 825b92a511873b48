#include "common/loop_clock.h"

#include <cstdlib>
#include <cstring>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace rpc::detail {

// CPUID leaf 0x80000007, EDX bit 8: the counter runs at a constant rate in
// every P-, C- and T-state (Linux's constant_tsc and nonstop_tsc). The
// environment variable LIBRPC_LOOP_CLOCK=monotonic turns the counter off
// (every read a clock_gettime), for a machine whose counters disagree
// between CPUs although the CPU calls them invariant.
bool tsc_is_invariant() {
  if (const char* choice = std::getenv("LIBRPC_LOOP_CLOCK");
      choice != nullptr && std::strcmp(choice, "monotonic") == 0) {
    return false;
  }
#if defined(__x86_64__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(0x80000000u, &eax, &ebx, &ecx, &edx) == 0 || eax < 0x80000007u) return false;
  if (__get_cpuid(0x80000007u, &eax, &ebx, &ecx, &edx) == 0) return false;
  return (edx & (1u << 8)) != 0;
#else
  return false;
#endif
}

}  // namespace rpc::detail
