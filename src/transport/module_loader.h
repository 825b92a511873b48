// Finds and loads transport modules (registry.h) with dlopen.
//
// Where it looks, in order:
//   1. the directories in LIBRPC_MODULE_DIR (colon-separated), if it is
//      set: then nowhere else;
//   2. otherwise <directory of librpc.so>/librpc (the installed layout:
//      <libdir>/librpc/librpc-verbs.so), then the directory of librpc.so
//      itself (the build tree: build/src/), then the module directory
//      this librpc was configured to install to.
// A module is loaded once per process and never unloaded.
#pragma once

#include <signal.h>

#include <array>
#include <string>
#include <vector>

#include "librpc/error.h"
#include "transport/module.h"
#include "transport/registry.h"

namespace rpc::detail {

// Puts back, when it goes out of scope, every signal disposition that
// changed while it lived. Module loads and module transport constructors
// run under one: Debian's libfabric pulls in the PSM libraries, which
// install handlers for SIGINT, SIGTERM, SIGSEGV and others, so that Ctrl-C
// stopped running the application's own handler (or killing it by the
// signal) and made it exit 1 instead.
class KeepSignalHandlers {
 public:
  explicit KeepSignalHandlers(std::string what);  // `what`: for the log line
  ~KeepSignalHandlers();
  KeepSignalHandlers(const KeepSignalHandlers&) = delete;
  KeepSignalHandlers& operator=(const KeepSignalHandlers&) = delete;

 private:
  std::string what_;
  std::array<struct sigaction, NSIG> actions_{};
  std::array<bool, NSIG> saved_{};
};

// The directories searched, in order (see above).
std::vector<std::string> module_search_dirs();
// Loads the module of `entry` (a module transport) and checks its ABI and
// librpc version. The failure says which file it looked for, where, and
// why each candidate was refused.
Result<const TransportModule*> load_transport_module(const TransportEntry& entry);

}  // namespace rpc::detail
