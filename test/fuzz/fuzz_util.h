// Shared by the libFuzzer targets in this directory: an always-on check that
// aborts (libFuzzer then saves the input), and access to RpcImpl internals.
#pragma once

#include <cstdio>
#include <cstdlib>

// Not assert(): the check must hold in every build type.
#define FUZZ_CHECK(cond)                                                                 \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      std::fprintf(stderr, "%s:%d: FUZZ_CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                      \
    }                                                                                    \
  } while (0)
