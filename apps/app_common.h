// Helpers shared by the example applications: command-line parsing and
// stopping on SIGINT/SIGTERM. (Connecting and blocking calls are the
// library's: Rpc::connect, rpc::call_sync.) Header-only.
#pragma once

#include <fmt/core.h>

#include <atomic>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "librpc/rpc_all.h"

namespace app {

// Exit codes of every app.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  // connect failed, timeout, bad response
inline constexpr int kExitUsage = 2;    // malformed command line

// The command line split into positional words and "--name value" options.
struct CommandLine {
  std::vector<std::string> positional;
  std::map<std::string, std::string, std::less<>> options;  // name without "--"
  bool help = false;                                        // -h or --help was given

  bool has(std::string_view name) const { return options.find(name) != options.end(); }
  std::string get(std::string_view name, std::string_view fallback) const {
    auto it = options.find(name);
    return it == options.end() ? std::string(fallback) : it->second;
  }
};

// Splits argv[first..argc). Options take a value, as "--name value" or
// "--name=value"; only the names in `known` are accepted. "--" ends the
// options, and a lone "-" is positional. Fails, naming the word, on an
// unknown option or a missing value.
inline rpc::Result<CommandLine> parse_command_line(int argc, char** argv, int first,
                                                   std::initializer_list<std::string_view> known) {
  CommandLine cl;
  bool options_done = false;
  for (int i = first; i < argc; i++) {
    const std::string_view word = argv[i];
    if (options_done || word == "-" || !word.starts_with("-")) {
      cl.positional.emplace_back(word);
      continue;
    }
    if (word == "--") {
      options_done = true;
      continue;
    }
    if (word == "-h" || word == "--help") {
      cl.help = true;
      continue;
    }
    if (!word.starts_with("--")) return rpc::Failure{fmt::format("unknown option '{}'", word)};
    std::string_view name = word.substr(2);
    std::optional<std::string> value;
    if (const size_t eq = name.find('='); eq != std::string_view::npos) {
      value = std::string(name.substr(eq + 1));
      name = name.substr(0, eq);
    }
    bool is_known = false;
    for (std::string_view k : known) is_known = is_known || k == name;
    if (!is_known) return rpc::Failure{fmt::format("unknown option '--{}'", name)};
    if (!value) {
      if (i + 1 >= argc) return rpc::Failure{fmt::format("option '--{}' needs a value", name)};
      value = argv[++i];
    }
    cl.options[std::string(name)] = std::move(*value);
  }
  return cl;
}

// A decimal integer in [min, max], or nothing.
inline std::optional<uint64_t> parse_uint(std::string_view text, uint64_t min, uint64_t max) {
  uint64_t v = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (ec != std::errc() || ptr != end || text.empty() || v < min || v > max) return std::nullopt;
  return v;
}

// Set by SIGINT and SIGTERM once install_stop_signals() has run. A lock-free
// atomic is what a signal handler may touch.
inline std::atomic<bool> g_stop_requested{false};
static_assert(std::atomic<bool>::is_always_lock_free);

inline void install_stop_signals() {
  auto on_signal = [](int) { g_stop_requested.store(true, std::memory_order_relaxed); };
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
}

}  // namespace app
