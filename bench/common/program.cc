// What every benchmark's main() shares.
#include "common/program.h"

#include <fmt/core.h>

#include <atomic>
#include <csignal>
#include <exception>

#include "common/args.h"

namespace bench {

namespace {

// A lock-free atomic is what a signal handler may touch.
std::atomic<bool> g_stop{false};
static_assert(std::atomic<bool>::is_always_lock_free);

extern "C" void on_stop_signal(int) { g_stop.store(true, std::memory_order_relaxed); }

}  // namespace

int run_main(std::string_view program, void (*print_usage)(std::FILE*),
             const std::function<int()>& body) {
  try {
    return body();
  } catch (const UsageError& e) {
    fmt::print(stderr, "{}: error: {}\n", program, e.what());
    print_usage(stderr);
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "{}: error: {}\n", program, e.what());
    return 1;
  }
}

void install_stop_signals() {
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
}

bool stop_requested() { return g_stop.load(std::memory_order_relaxed); }

}  // namespace bench
