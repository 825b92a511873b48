// What every benchmark's main() shares: the exit-code convention and
// stopping on SIGINT/SIGTERM.
#pragma once

#include <cstdio>
#include <functional>
#include <string_view>

namespace bench {

// Runs body and returns its exit status; an exception ends it instead:
// UsageError prints the message and the usage text and returns 2, anything
// else prints the message and returns 1. Messages start with `program`.
int run_main(std::string_view program, void (*print_usage)(std::FILE*),
             const std::function<int()>& body);

// After this, SIGINT and SIGTERM set the flag stop_requested() reads
// instead of killing the process, so a run can end early and still report.
void install_stop_signals();
bool stop_requested();

}  // namespace bench
