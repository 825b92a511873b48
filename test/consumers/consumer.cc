// An out-of-tree program using librpc the way a user's would: built by each
// consumer project in test/consumers/ (Meson subproject, CMake
// find_package, pkg-config), against headers and a library it did not build
// itself. It echoes one request over udp on 127.0.0.1, checks that the
// headers, the library it loaded and its build system agree on the version,
// and prints "ok".
//
//   consumer [--fabric]    --fabric: also open an Rpc over libfabric's shm
//                          provider, which loads the installed module
#include <librpc/rpc_all.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <string_view>

#ifndef EXPECTED_LIBRPC_VERSION
#error "the consumer's build passes the version its build system found as EXPECTED_LIBRPC_VERSION"
#endif

namespace {

constexpr rpc::ReqType kEcho = 1;

int fail(const char* what) {
  std::printf("consumer: %s\n", what);
  return 1;
}

int echo_once() {
  rpc::Nexus nexus({.uri = "127.0.0.1:0"});
  if (!nexus.register_handler(kEcho, [](rpc::ReqHandle& h) {
        auto& resp = h.pre_resp_buffer();
        std::memcpy(resp.data(), h.request().data(), h.request().size());
        resp.resize(h.request().size());
        h.rpc().enqueue_response(h, resp);
      })) {
    return fail("register_handler failed");
  }
  rpc::Rpc server(nexus, {.rpc_id = 1});
  rpc::Rpc client(nexus, {.rpc_id = 0});
  auto sn = client.create_session(nexus.uri(), 1);
  if (!sn) return fail("create_session failed");
  rpc::OwnedBuffer req(client, 64);
  rpc::OwnedBuffer resp(client, 64);
  std::memcpy(req.get().data(), "hello from a consumer project", 30);
  req.get().resize(30);
  bool done = false;
  rpc::Errc outcome = rpc::Errc::kOk;
  if (client.enqueue_request(*sn, kEcho, req, resp, [&](rpc::Rpc&, const rpc::Completion& c) {
        outcome = c.errc;
        done = true;
      }) != rpc::Errc::kOk) {
    return fail("enqueue_request refused");
  }
  for (int i = 0; !done && i < 10'000'000; ++i) {
    client.run_event_loop_once();
    server.run_event_loop_once();
  }
  if (!done) return fail("no response");
  if (outcome != rpc::Errc::kOk) return fail("the request failed");
  if (resp.get().size() != 30 || std::memcmp(resp.get().data(), req.get().data(), 30) != 0) {
    return fail("the echo differs from the request");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string_view expected = EXPECTED_LIBRPC_VERSION;
  if (expected != LIBRPC_VERSION_STRING || expected != rpc::library_version()) {
    std::printf("consumer: version mismatch: build system %s, headers %s, library %s\n",
                EXPECTED_LIBRPC_VERSION, LIBRPC_VERSION_STRING, rpc::library_version());
    return 1;
  }
  try {
    if (int rc = echo_once(); rc != 0) return rc;
    if (argc > 1 && std::string_view(argv[1]) == "--fabric") {
      rpc::Nexus nexus({.uri = "127.0.0.1:0"});
      rpc::Rpc rpc(nexus, {.rpc_id = 0, .transport = "fabric", .fabric_provider = "shm"});
    }
  } catch (const std::exception& e) {
    std::printf("consumer: %s\n", e.what());
    return 1;
  }
  std::printf("ok (librpc %s)\n", rpc::library_version());
  return 0;
}
