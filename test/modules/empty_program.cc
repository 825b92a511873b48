// A program that links librpc.so and does nothing with it: what every
// program linked with librpc pays before main. test/modules/startup.sh runs it.
//
//   empty_program exit   returns at once (start-up time)
//   empty_program libs   fails listing any RDMA library in the process
//   empty_program wait   prints "ready" and sleeps until a signal ends it
#include <link.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string_view>

#include "librpc/rpc_all.h"

namespace {

// Libraries librpc.so must not pull in: they belong to the transport
// modules, loaded only when an Rpc asks for their transport.
constexpr const char* kRdmaLibraries[] = {"libfabric",     "libibverbs", "libmlx5", "libpsm",
                                          "libinfinipath", "librdmacm",  "libefa"};

int report_rdma_library(dl_phdr_info* info, size_t, void* found) {
  const std::string_view name = info->dlpi_name != nullptr ? info->dlpi_name : "";
  for (const char* lib : kRdmaLibraries) {
    if (name.find(lib) != std::string_view::npos) {
      std::printf("loaded at start-up: %s\n", info->dlpi_name);
      *static_cast<int*>(found) += 1;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Uses librpc, so that it is really linked and initialised.
  const std::string_view ok = rpc::to_string(rpc::Errc::kOk);
  const char* mode = argc > 1 ? argv[1] : "exit";
  if (std::strcmp(mode, "libs") == 0) {
    int found = 0;
    dl_iterate_phdr(report_rdma_library, &found);
    return found == 0 ? 0 : 1;
  }
  if (std::strcmp(mode, "wait") == 0) {
    std::printf("ready\n");
    std::fflush(stdout);
    for (;;) ::pause();
  }
  return ok.empty() ? 1 : 0;
}
