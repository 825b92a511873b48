// One fmt-based logging macro family. Messages below RPC_LOG_FLOOR are
// compiled out; the runtime level comes from the RPC_LOG_LEVEL environment
// variable (error, warn, info, debug, trace; default warn). Output goes to
// stderr: the library never prints to stdout.
#pragma once

#include <cstdio>

#include <fmt/format.h>

namespace rpc::detail {

enum class LogLevel : int { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3, kTrace = 4 };

#ifndef RPC_LOG_FLOOR
#define RPC_LOG_FLOOR 3  // debug and above compiled in; trace compiled out
#endif

LogLevel runtime_log_level();

template <typename... Args>
void log_line(LogLevel level, fmt::format_string<Args...> format, Args&&... args) {
  static constexpr const char* kNames[] = {"error", "warn", "info", "debug", "trace"};
  fmt::print(stderr, "librpc {}: {}\n", kNames[static_cast<int>(level)],
             fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace rpc::detail

#define RPC_LOG(level_int, level_enum, ...)                                            \
  do {                                                                                 \
    if constexpr ((level_int) <= RPC_LOG_FLOOR) {                                      \
      if (::rpc::detail::runtime_log_level() >= ::rpc::detail::LogLevel::level_enum) { \
        ::rpc::detail::log_line(::rpc::detail::LogLevel::level_enum, __VA_ARGS__);     \
      }                                                                                \
    }                                                                                  \
  } while (0)

#define RPC_LOG_ERROR(...) RPC_LOG(0, kError, __VA_ARGS__)
#define RPC_LOG_WARN(...) RPC_LOG(1, kWarn, __VA_ARGS__)
#define RPC_LOG_INFO(...) RPC_LOG(2, kInfo, __VA_ARGS__)
#define RPC_LOG_DEBUG(...) RPC_LOG(3, kDebug, __VA_ARGS__)
#define RPC_LOG_TRACE(...) RPC_LOG(4, kTrace, __VA_ARGS__)

// Invariant check that stays on in release builds.
#define RPC_ASSERT(cond, msg)                                       \
  do {                                                              \
    if (!(cond)) [[unlikely]] {                                     \
      ::rpc::detail::assert_failed(#cond, msg, __FILE__, __LINE__); \
    }                                                               \
  } while (0)

// API misuse (a second response, re-entering the event loop, a call from
// the wrong thread, ...): prints what the caller did wrong and aborts, in
// every build. Corrupting state silently instead would surface far away.
#define RPC_CHECK_USAGE(cond, ...)                                    \
  do {                                                                \
    if (!(cond)) [[unlikely]] {                                       \
      ::rpc::detail::usage_error(::fmt::format(__VA_ARGS__).c_str()); \
    }                                                                 \
  } while (0)

namespace rpc::detail {
[[noreturn]] void assert_failed(const char* cond, const char* msg, const char* file, int line);
[[noreturn]] void usage_error(const char* what);
}  // namespace rpc::detail
