// The runtime log level and the handlers of RPC_ASSERT and
// RPC_CHECK_USAGE. Compiled into librpc.so and into each transport module
// (a module is self-contained: it resolves nothing from librpc.so).
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/log.h"

namespace rpc {

namespace detail {

LogLevel runtime_log_level() {
  static const LogLevel level = [] {
    const char* env = std::getenv("RPC_LOG_LEVEL");
    if (env == nullptr) return LogLevel::kWarn;
    static constexpr const char* kNames[] = {"error", "warn", "info", "debug", "trace"};
    for (int i = 0; i < 5; i++) {
      if (std::strcmp(env, kNames[i]) == 0) return static_cast<LogLevel>(i);
    }
    return LogLevel::kWarn;
  }();
  return level;
}

void assert_failed(const char* cond, const char* msg, const char* file, int line) {
  fmt::print(stderr, "librpc: invariant violated: {} ({}) at {}:{}\n", msg, cond, file, line);
  std::abort();
}

void usage_error(const char* what) {
  fmt::print(stderr, "librpc: API misuse: {}\n", what);
  std::fflush(stderr);
  std::abort();
}

}  // namespace detail
}  // namespace rpc
