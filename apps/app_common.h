// Helpers shared by the example applications: command-line parsing,
// stopping on SIGINT/SIGTERM, driving an Rpc until a condition holds, and
// connecting a client session. Header-only; uses only the public API.
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

// Drives rpc until done() returns true. Returns false when `timeout` passes
// first, or when a stop signal arrives.
template <typename Done>
bool run_until(rpc::Rpc& rpc, Done&& done, std::chrono::steady_clock::duration timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (g_stop_requested.load(std::memory_order_relaxed)) return false;
    if (std::chrono::steady_clock::now() > deadline) return false;
    rpc.run_event_loop_once();
  }
  return true;
}

// Session events of a client Rpc that opens one session. Install callback()
// as RpcConfig::session_callback; the watcher must outlive the Rpc.
struct SessionWatcher {
  bool connected = false;
  bool failed = false;  // connect failed, or the session was reset
  rpc::SmErr reason = rpc::SmErr::kNone;

  rpc::SessionCallback callback() {
    return [this](rpc::SessionNum, rpc::SessionEvent event, rpc::SmErr err) {
      switch (event) {
        case rpc::SessionEvent::kConnected:
          connected = true;
          break;
        case rpc::SessionEvent::kConnectFailed:
        case rpc::SessionEvent::kReset:
          failed = true;
          reason = err;
          break;
        case rpc::SessionEvent::kDisconnected:
          connected = false;
          break;
      }
    };
  }
};

// Opens a session to Rpc remote_rpc_id at the Nexus listening on remote_uri
// and drives rpc until it connects. The Nexus gives up after its
// sm_timeout_ms; `timeout` is only a backstop. On failure the message says
// why, with the session-management reason.
inline rpc::Result<rpc::SessionNum> connect_session(rpc::Rpc& rpc, SessionWatcher& watcher,
                                                    const std::string& remote_uri,
                                                    rpc::RpcId remote_rpc_id,
                                                    std::chrono::steady_clock::duration timeout) {
  auto sn = rpc.create_session(remote_uri, remote_rpc_id);
  if (!sn) return rpc::Failure{sn.error()};
  if (!run_until(
          rpc, [&] { return watcher.connected || watcher.failed; }, timeout)) {
    if (g_stop_requested.load()) return rpc::Failure{"interrupted"};
    return rpc::Failure{"no session event before the backstop timeout"};
  }
  if (watcher.failed) return rpc::Failure{std::string(rpc::to_string(watcher.reason))};
  return *sn;
}

// Where a continuation records how one request ended. Pass its address as
// the tag; it must outlive the Rpc (whose destructor runs the continuations
// of outstanding requests).
struct RequestOutcome {
  bool done = false;
  rpc::Errc errc = rpc::Errc::kOk;
  size_t resp_size = 0;
};

inline void record_outcome(rpc::Rpc&, const rpc::Completion& c) {
  auto* outcome = static_cast<RequestOutcome*>(c.tag);
  outcome->done = true;
  outcome->errc = c.errc;
  outcome->resp_size = c.resp_size;
}

// Sends req on session sn, waits for the response in resp. Fails with the
// request's error, or on timeout (the request then stays outstanding until
// the Rpc is destroyed).
inline rpc::Result<size_t> call(rpc::Rpc& rpc, rpc::SessionNum sn, rpc::ReqType req_type,
                                rpc::MsgBuffer& req, rpc::MsgBuffer& resp, RequestOutcome& outcome,
                                std::chrono::steady_clock::duration timeout) {
  outcome = RequestOutcome{};
  const rpc::Errc errc = rpc.enqueue_request(sn, req_type, req, resp, record_outcome, &outcome);
  if (errc != rpc::Errc::kOk) return rpc::Failure{std::string(rpc::to_string(errc))};
  if (!run_until(
          rpc, [&] { return outcome.done; }, timeout)) {
    if (g_stop_requested.load()) return rpc::Failure{"interrupted"};
    return rpc::Failure{"no response before the timeout"};
  }
  if (outcome.errc != rpc::Errc::kOk)
    return rpc::Failure{std::string(rpc::to_string(outcome.errc))};
  return outcome.resp_size;
}

}  // namespace app
