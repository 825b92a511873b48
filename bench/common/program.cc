// What every benchmark's main() shares.
#include "common/program.h"

#include <fmt/core.h>

#include <atomic>
#include <csignal>
#include <exception>

#include "cli.h"
#include "common/args.h"

namespace bench {

namespace {

// A lock-free atomic is what a signal handler may touch.
std::atomic<bool> g_stop{false};
static_assert(std::atomic<bool>::is_always_lock_free);

CommandLine g_command_line;

extern "C" void on_stop_signal(int) { g_stop.store(true, std::memory_order_relaxed); }

}  // namespace

int run_main(CLI::App& app, int argc, char** argv, const std::function<int()>& body) {
  g_command_line = {argc, argv};
  try {
    if (const auto status = measure::parse_command_line(app, argc, argv)) return *status;
    return body();
  } catch (const UsageError& e) {
    return measure::usage_error(app, e.what());
  } catch (const std::exception& e) {
    fmt::print(stderr, "{}: error: {}\n", app.get_name(), e.what());
    return 1;
  }
}

CommandLine command_line() { return g_command_line; }

void install_stop_signals() {
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
}

bool stop_requested() { return g_stop.load(std::memory_order_relaxed); }

}  // namespace bench
