// Transport modules (transport/registry.h, transport/module_loader.h): the
// search path, the refusal of modules that do not fit, the errors an Rpc
// gives for a missing one, and udp with no module anywhere.
//
// RPC_TEST_MODULE_DIR holds the bogus modules of bogus_module.cc;
// RPC_MODULE_BUILD_DIR the real ones (build/src).
#include <dlfcn.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/auxv.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <optional>
#include <set>
#include <string>

#include "librpc/rpc_all.h"
#include "rpc_build_config.h"
#include "test_util.h"
#include "transport/module_loader.h"
#include "transport/registry.h"

using rpc::detail::find_transport;
using rpc::detail::load_transport_module;
using rpc::detail::module_search_dirs;
using rpc::detail::TransportEntry;

namespace {

// Sets LIBRPC_MODULE_DIR (or unsets it: nullopt) for one test and puts
// back what was there.
class ModuleDirEnv {
 public:
  explicit ModuleDirEnv(std::optional<std::string> value) {
    if (const char* old = std::getenv("LIBRPC_MODULE_DIR")) old_ = old;
    if (value) {
      ::setenv("LIBRPC_MODULE_DIR", value->c_str(), 1);
    } else {
      ::unsetenv("LIBRPC_MODULE_DIR");
    }
  }
  ~ModuleDirEnv() {
    if (old_) {
      ::setenv("LIBRPC_MODULE_DIR", old_->c_str(), 1);
    } else {
      ::unsetenv("LIBRPC_MODULE_DIR");
    }
  }
  ModuleDirEnv(const ModuleDirEnv&) = delete;
  ModuleDirEnv& operator=(const ModuleDirEnv&) = delete;

 private:
  std::optional<std::string> old_;
};

// An entry like fabric's, pointing at one of the bogus modules.
TransportEntry bogus_entry(const char* file) {
  return TransportEntry{"fabric", 4, nullptr, file, true, "nothing"};
}

std::string load_error(const char* file) {
  ModuleDirEnv env(RPC_TEST_MODULE_DIR);
  auto module = load_transport_module(bogus_entry(file));
  REQUIRE_FALSE(module);
  return module.error();
}

std::string empty_dir() {
  char tmpl[] = "/tmp/librpc-no-modules-XXXXXX";
  const char* dir = ::mkdtemp(tmpl);
  REQUIRE(dir != nullptr);
  return dir;
}

}  // namespace

TEST_CASE("every transport is in the table, with a unique name and wire id") {
  std::set<std::string_view> names;
  std::set<uint8_t> ids;
  for (const TransportEntry& e : rpc::detail::transport_table()) {
    CHECK(names.insert(e.name).second);
    CHECK(e.wire_id != 0);
    CHECK(ids.insert(e.wire_id).second);
    CHECK((e.built_in != nullptr) == (e.module_file == nullptr));
  }
  REQUIRE(find_transport("udp") != nullptr);
  CHECK(find_transport("udp")->built_in != nullptr);
  REQUIRE(find_transport("fabric") != nullptr);
  CHECK(std::string(find_transport("fabric")->module_file) == "librpc-fabric.so");
  REQUIRE(find_transport("verbs") != nullptr);
  CHECK(std::string(find_transport("verbs")->module_file) == "librpc-verbs.so");
  CHECK(find_transport("tcp") == nullptr);
  CHECK(rpc::detail::transport_wire_id("tcp") == 0);
}

TEST_CASE("modules are searched in LIBRPC_MODULE_DIR alone when it is set") {
  ModuleDirEnv env("/a:/b/c::/d");
  CHECK(module_search_dirs() == std::vector<std::string>{"/a", "/b/c", "/d"});
}

TEST_CASE("without LIBRPC_MODULE_DIR, modules are searched next to librpc, then where installed") {
  ModuleDirEnv env(std::nullopt);
  const std::vector<std::string> dirs = module_search_dirs();
  // The core is linked into this test program: "next to librpc" is its
  // directory (for programs linked with librpc.so, that library's).
  const std::string own = std::filesystem::canonical("/proc/self/exe").parent_path().string();
  REQUIRE(dirs.size() == 3);
  CHECK(std::filesystem::weakly_canonical(dirs[0]) ==
        std::filesystem::weakly_canonical(own + "/librpc"));
  CHECK(std::filesystem::weakly_canonical(dirs[1]) == std::filesystem::weakly_canonical(own));
  CHECK(dirs[2] == RPC_MODULE_INSTALL_DIR);
}

// Run only by setuid_module_dir.sh, as a set-user-ID copy started by an
// unprivileged user with LIBRPC_MODULE_DIR set: the variable must not
// choose what a privileged program loads.
TEST_CASE("a set-user-ID program ignores LIBRPC_MODULE_DIR", "[.setuid]") {
  REQUIRE(::getauxval(AT_SECURE) != 0);
  REQUIRE(std::getenv("LIBRPC_MODULE_DIR") != nullptr);  // the variable is there...
  const std::vector<std::string> dirs = module_search_dirs();
  for (const std::string& dir : dirs) CHECK(dir != std::getenv("LIBRPC_MODULE_DIR"));
  CHECK(dirs.back() == RPC_MODULE_INSTALL_DIR);  // ...and the default path is used
}

TEST_CASE("a module of another ABI version is refused, saying which") {
  const std::string error = load_error("librpc-test-abi.so");
  CHECK_THAT(error, Catch::Contains("librpc-test-abi.so"));
  CHECK_THAT(error, Catch::Contains("built for transport module ABI 999"));
  CHECK_THAT(error, Catch::Contains("this librpc uses ABI 1"));
}

TEST_CASE("a module built with another librpc version is refused") {
  const std::string error = load_error("librpc-test-version.so");
  CHECK_THAT(error, Catch::Contains("built with librpc 0.0.0-other"));
  CHECK_THAT(error, Catch::Contains(std::string("this is librpc ") + RPC_VERSION));
}

TEST_CASE("the module of another transport is refused") {
  const std::string error = load_error("librpc-test-name.so");
  CHECK_THAT(error, Catch::Contains("is the module of transport 'other', not 'fabric'"));
}

TEST_CASE("a shared object without the entry point is refused") {
  const std::string error = load_error("librpc-test-noentry.so");
  CHECK_THAT(error, Catch::Contains("no librpc_transport_module_v1 entry point"));
}

TEST_CASE("a missing module: the Rpc's error names the module, where it looked and what to do") {
  const std::string dir = empty_dir();
  ModuleDirEnv env(dir);
  rpc::Nexus nexus({.uri = "127.0.0.1:0", .num_bg_threads = 0});
  try {
    rpc::Rpc rpc(nexus, {.rpc_id = 0, .transport = "verbs"});
    FAIL("an Rpc over verbs was created with no module to load");
  } catch (const rpc::Error& e) {
    const std::string what = e.what();
    CHECK_THAT(what, Catch::Contains("librpc-verbs.so"));
    CHECK_THAT(what, Catch::Contains(dir));
    CHECK_THAT(what, Catch::Contains("LIBRPC_MODULE_DIR"));
  }
  std::filesystem::remove(dir);
}

TEST_CASE("an unknown transport's error lists the known ones") {
  rpc::Nexus nexus({.uri = "127.0.0.1:0", .num_bg_threads = 0});
  try {
    rpc::Rpc rpc(nexus, {.rpc_id = 0, .transport = "carrier-pigeon"});
    FAIL("an Rpc over an unknown transport was created");
  } catch (const rpc::Error& e) {
    CHECK_THAT(std::string(e.what()),
               Catch::Contains("udp, fake, samehost, verbs (module), fabric (module)"));
  }
}

TEST_CASE("udp works with no transport module anywhere") {
  const std::string dir = empty_dir();
  ModuleDirEnv env(dir);
  rpc::Nexus nexus({.uri = "127.0.0.1:0", .num_bg_threads = 0});
  REQUIRE(nexus.register_handler(rpc::test::kEcho, rpc::test::echo_into_response));
  rpc::Rpc server(nexus, {.rpc_id = 1, .transport = "udp"});
  rpc::Rpc client(nexus, {.rpc_id = 0, .transport = "udp"});
  auto sn = client.create_session(nexus.uri(), 1);
  REQUIRE(sn);
  REQUIRE(rpc::test::run_all_until({&client, &server}, [&] { return client.is_connected(*sn); }));
  rpc::test::EchoCall call;
  REQUIRE(call.prepare(client, 3000, 7));
  REQUIRE(call.enqueue(client, *sn, rpc::test::kEcho) == rpc::Errc::kOk);
  REQUIRE(rpc::test::run_all_until({&client, &server}, [&] { return call.completions > 0; }));
  CHECK(call.echoed());
  call.release(client);
  std::filesystem::remove(dir);
}

#if RPC_MODULE_BUILT_fabric
namespace {
void app_handler(int) {}
}  // namespace

// libfabric pulls in the PSM libraries, which install their own handlers
// for SIGINT, SIGTERM, SIGSEGV, ... when loaded: an application's Ctrl-C
// handler stopped running once an Rpc over fabric existed.
TEST_CASE(
    "loading the fabric module and creating its transport keep the application's signal "
    "handlers") {
  ModuleDirEnv env(RPC_MODULE_BUILD_DIR);
  const int signals[] = {SIGINT, SIGTERM, SIGSEGV, SIGBUS, SIGILL, SIGABRT, SIGQUIT, SIGHUP};
  struct sigaction before[std::size(signals)];
  for (size_t i = 0; i < std::size(signals); i++) {
    REQUIRE(::sigaction(signals[i], nullptr, &before[i]) == 0);
    struct sigaction mine {};
    mine.sa_handler = app_handler;
    REQUIRE(::sigaction(signals[i], &mine, nullptr) == 0);
  }
  {
    rpc::Nexus nexus({.uri = "127.0.0.1:0", .num_bg_threads = 0});
    rpc::Rpc tcp(nexus, {.rpc_id = 0, .transport = "fabric", .fabric_provider = "tcp;ofi_rxm"});
    rpc::Rpc shm(nexus, {.rpc_id = 1, .transport = "fabric", .fabric_provider = "shm"});
  }
  for (size_t i = 0; i < std::size(signals); i++) {
    struct sigaction now {};
    REQUIRE(::sigaction(signals[i], nullptr, &now) == 0);
    CHECK(now.sa_handler == &app_handler);
    REQUIRE(::sigaction(signals[i], &before[i], nullptr) == 0);
  }
}

TEST_CASE("the fabric module loads through LIBRPC_MODULE_DIR, once per process") {
  ModuleDirEnv env(RPC_MODULE_BUILD_DIR);
  const TransportEntry& fabric = *find_transport("fabric");
  auto first = load_transport_module(fabric);
  REQUIRE(first);
  auto again = load_transport_module(fabric);
  REQUIRE(again);
  CHECK(*first == *again);
  CHECK(std::string((*first)->transport_name) == "fabric");
  rpc::Nexus nexus({.uri = "127.0.0.1:0", .num_bg_threads = 0});
  rpc::Rpc rpc(nexus, {.rpc_id = 0, .transport = "fabric", .fabric_provider = "shm"});
  CHECK(rpc.transport_name() == "fabric");
}
#endif
