// What every benchmark's main() shares: parsing with the exit-code
// convention and stopping on SIGINT/SIGTERM.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace bench {

// Parses the command line into app's options (tools/measure/cli.h: --help
// exits 0, a bad command line 2), then runs body and returns its exit
// status; an exception ends it instead: UsageError prints the message and
// the --help hint and returns 2, anything else prints the message and
// returns 1. Messages start with app's name. Keeps argc/argv for
// command_line().
int run_main(CLI::App& app, int argc, char** argv, const std::function<int()>& body);

// The arguments run_main() was given (argc 0 before it runs).
struct CommandLine {
  int argc = 0;
  char** argv = nullptr;
};
CommandLine command_line();

// After this, SIGINT and SIGTERM set the flag stop_requested() reads
// instead of killing the process, so a run can end early and still report.
void install_stop_signals();
bool stop_requested();

}  // namespace bench
