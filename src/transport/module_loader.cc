// Transport modules: search path, dlopen, ABI check (module_loader.h).
#include "transport/module_loader.h"

#include <dlfcn.h>
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string_view>

#include <fmt/format.h>

#include "common/log.h"
#include "rpc_build_config.h"

namespace rpc::detail {

namespace {

constexpr const char* kModuleDirEnv = "LIBRPC_MODULE_DIR";

// The directory of the object this function is linked into: librpc.so, or
// the executable when the core is linked statically (the test suites).
std::string own_dir() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&own_dir), &info) == 0 || info.dli_fname == nullptr) {
    return {};
  }
  std::string path = info.dli_fname;
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
}

bool is_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// One load per module file and process; later Rpcs reuse it.
std::mutex loaded_mutex;
std::map<std::string, const TransportModule*, std::less<>> loaded;

// Opens `path` and checks what it says it is. The handle is kept open for
// the life of the process when it passes (transports created by it may
// live until exit); closed otherwise.
Result<const TransportModule*> open_module(const std::string& path, const TransportEntry& entry) {
  void* handle = nullptr;
  {
    const KeepSignalHandlers keep(path);
    handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  }
  if (handle == nullptr) {
    const char* why = ::dlerror();
    return Failure{fmt::format("{}: {}", path, why != nullptr ? why : "dlopen failed")};
  }
  auto fail = [&](std::string why) -> Result<const TransportModule*> {
    ::dlclose(handle);
    return Failure{fmt::format("{}: {}", path, why)};
  };
  void* sym = ::dlsym(handle, RPC_TRANSPORT_MODULE_ENTRY);
  if (sym == nullptr) {
    return fail(
        fmt::format("no {} entry point: not a transport module of this ABI version "
                    "(librpc {} expects ABI {})",
                    RPC_TRANSPORT_MODULE_ENTRY, RPC_VERSION, kTransportModuleAbi));
  }
  const TransportModule* module = reinterpret_cast<RpcTransportModuleEntry>(sym)();
  if (module == nullptr) return fail("its entry point returned no module");
  if (module->abi != kTransportModuleAbi) {
    return fail(fmt::format("built for transport module ABI {}, this librpc uses ABI {}",
                            module->abi, kTransportModuleAbi));
  }
  const std::string_view version = module->librpc_version ? module->librpc_version : "";
  if (version != RPC_VERSION) {
    return fail(
        fmt::format("built with librpc {}, this is librpc {}; install the module that "
                    "came with this librpc",
                    version.empty() ? "(unknown)" : version, RPC_VERSION));
  }
  if (module->transport_name == nullptr || entry.name != module->transport_name ||
      module->create == nullptr) {
    return fail(fmt::format("is the module of transport '{}', not '{}'",
                            module->transport_name ? module->transport_name : "(none)",
                            entry.name));
  }
  return module;
}

}  // namespace

KeepSignalHandlers::KeepSignalHandlers(std::string what) : what_(std::move(what)) {
  for (int sig = 1; sig < NSIG; sig++) saved_[sig] = ::sigaction(sig, nullptr, &actions_[sig]) == 0;
}

KeepSignalHandlers::~KeepSignalHandlers() {
  int changed = 0;
  for (int sig = 1; sig < NSIG; sig++) {
    struct sigaction now {};
    if (!saved_[sig] || ::sigaction(sig, nullptr, &now) != 0) continue;
    if (now.sa_handler == actions_[sig].sa_handler && now.sa_flags == actions_[sig].sa_flags) {
      continue;
    }
    (void)::sigaction(sig, &actions_[sig], nullptr);
    changed++;
  }
  if (changed > 0) {
    RPC_LOG_INFO("{} changed {} signal handler(s) of the application; restored", what_, changed);
  }
}

// secure_getenv: a set-user-ID or set-group-ID program ignores the variable,
// as the dynamic linker ignores LD_LIBRARY_PATH there; otherwise whoever
// runs it would choose the code it loads.
const char* module_dir_env() { return ::secure_getenv(kModuleDirEnv); }

std::vector<std::string> module_search_dirs() {
  std::vector<std::string> dirs;
  if (const char* env = module_dir_env(); env != nullptr) {
    std::string_view list = env;
    while (!list.empty()) {
      const size_t colon = list.find(':');
      const std::string_view dir = list.substr(0, colon);
      if (!dir.empty()) dirs.emplace_back(dir);
      if (colon == std::string_view::npos) break;
      list.remove_prefix(colon + 1);
    }
    return dirs;
  }
  if (const std::string own = own_dir(); !own.empty()) {
    dirs.push_back(own + "/librpc");
    dirs.push_back(own);
  }
  if (std::find(dirs.begin(), dirs.end(), RPC_MODULE_INSTALL_DIR) == dirs.end()) {
    dirs.emplace_back(RPC_MODULE_INSTALL_DIR);
  }
  return dirs;
}

Result<const TransportModule*> load_transport_module(const TransportEntry& entry) {
  std::lock_guard lock(loaded_mutex);
  if (auto it = loaded.find(entry.module_file); it != loaded.end()) return it->second;

  const std::vector<std::string> dirs = module_search_dirs();
  std::string refused;  // candidates that exist but could not be used
  for (const std::string& dir : dirs) {
    const std::string path = dir + "/" + entry.module_file;
    if (!is_file(path)) continue;
    auto module = open_module(path, entry);
    if (module) {
      loaded.emplace(entry.module_file, *module);
      return module;
    }
    refused += "; " + module.error();
  }

  std::string where;
  for (const std::string& dir : dirs) where += (where.empty() ? "" : ", ") + dir;
  if (where.empty()) where = fmt::format("nowhere ({} is set but empty)", kModuleDirEnv);
  const bool from_env = module_dir_env() != nullptr;
  std::string message = fmt::format(
      "transport '{}' is the module {}, which could not be loaded (looked in {}{}){}", entry.name,
      entry.module_file, where, from_env ? fmt::format(", from {}", kModuleDirEnv) : "", refused);
  if (refused.empty()) {
    message += entry.module_built ? fmt::format(
                                        "; install it with librpc, or set {} to the directory that "
                                        "holds it",
                                        kModuleDirEnv)
                                  : fmt::format(
                                        "; this build of librpc did not build it: install {} and "
                                        "rebuild",
                                        entry.build_needs);
  }
  return Failure{std::move(message)};
}

}  // namespace rpc::detail
