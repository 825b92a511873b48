// An out-of-tree program built against the installed Debian packages
// (librpc0 + librpc-dev) with `pkg-config --cflags --libs librpc` only:
// one Nexus on 127.0.0.1:0, a server and a client Rpc, one echo request
// over udp, the reply checked. Prints "ok" and exits 0 on success.
//
// With the argument "fabric" it only creates an Rpc over the fabric
// transport's shm provider: the librpc-fabric.so module must be found where
// the librpc-transport-fabric package installs it.
#include <librpc/rpc_all.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string_view>

namespace {

constexpr rpc::ReqType kEcho = 7;
constexpr std::string_view kMessage = "hello from a packaged librpc";

int echo_once() {
  rpc::Nexus nexus({.uri = "127.0.0.1:0"});
  auto registered = nexus.register_handler(kEcho, [](rpc::ReqHandle& h) {
    auto& resp = h.pre_resp_buffer();
    std::memcpy(resp.data(), h.request().data(), h.request().size());
    resp.resize(h.request().size());
    h.rpc().enqueue_response(h, resp);
  });
  if (!registered) {
    std::puts("register_handler failed");
    return 1;
  }

  rpc::Rpc server(nexus, {.rpc_id = 1});
  rpc::Rpc client(nexus, {.rpc_id = 0});
  auto sn = client.create_session(nexus.uri(), 1);
  if (!sn) {
    std::puts("create_session failed");
    return 1;
  }

  rpc::MsgBuffer req = client.alloc_msg_buffer(kMessage.size());
  rpc::MsgBuffer resp = client.alloc_msg_buffer(kMessage.size());
  std::memcpy(req.data(), kMessage.data(), kMessage.size());
  int outcome = -1;
  std::size_t resp_size = 0;
  rpc::Errc queued = client.enqueue_request(
      *sn, kEcho, req, resp, [&outcome, &resp_size](rpc::Rpc&, const rpc::Completion& c) {
        outcome = static_cast<int>(c.errc);
        resp_size = c.resp_size;
      });
  if (queued != rpc::Errc::kOk) {
    std::printf("enqueue_request: %d\n", static_cast<int>(queued));
    return 1;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (outcome < 0 && std::chrono::steady_clock::now() < deadline) {
    client.run_event_loop_once();
    server.run_event_loop_once();
  }
  if (outcome != static_cast<int>(rpc::Errc::kOk)) {
    std::printf("request outcome %d (-1: no answer in 20 s)\n", outcome);
    return 1;
  }
  const std::string_view echoed(reinterpret_cast<const char*>(resp.data()), resp_size);
  if (echoed != kMessage) {
    std::printf("echo mismatch: got '%.*s'\n", static_cast<int>(echoed.size()), echoed.data());
    return 1;
  }
  client.free_msg_buffer(req);
  client.free_msg_buffer(resp);
  return 0;
}

int fabric_rpc() {
  rpc::Nexus nexus({.uri = "127.0.0.1:0"});
  rpc::Rpc rpc(nexus, {.rpc_id = 0, .transport = "fabric", .fabric_provider = "shm"});
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string_view mode = argc > 1 ? argv[1] : "echo";
  try {
    const int rc = mode == "fabric" ? fabric_rpc() : echo_once();
    if (rc != 0) return rc;
  } catch (const std::exception& e) {
    std::printf("exception: %s\n", e.what());
    return 1;
  }
  std::puts("ok");
  return 0;
}
