// hello_server: the first librpc program. Answers every request of type
// kHelloReqType with "hello", from Rpc 0 of a Nexus at --uri, until
// interrupted (SIGINT/SIGTERM) or for --seconds.
//
//   hello_server [--uri HOST:PORT] [--seconds N]
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string_view>

#include "app_common.h"
#include "librpc/rpc_all.h"

namespace {

constexpr std::string_view kDefaultUri = "127.0.0.1:31850";
constexpr rpc::ReqType kHelloReqType = 1;
constexpr std::string_view kHello = "hello";

void usage(std::FILE* out) {
  fmt::print(out,
             "usage: hello_server [--uri HOST:PORT] [--seconds N]\n"
             "  --uri      address of this server's Nexus (default {})\n"
             "  --seconds  stop after N seconds (default: run until SIGINT/SIGTERM)\n",
             kDefaultUri);
}

// Foreground handler: the response fits in the preallocated buffer.
void handle_hello(rpc::ReqHandle& h) {
  rpc::MsgBuffer& resp = h.pre_resp_buffer();
  std::copy(kHello.begin(), kHello.end(), resp.data());
  resp.resize(kHello.size());
  h.rpc().enqueue_response(h, resp);
}

}  // namespace

int main(int argc, char** argv) {
  auto cl = app::parse_command_line(argc, argv, 1, {"uri", "seconds"});
  if (!cl || cl->help || !cl->positional.empty()) {
    if (!cl) fmt::print(stderr, "hello_server: {}\n", cl.error());
    usage(cl && cl->help ? stdout : stderr);
    return cl && cl->help ? app::kExitOk : app::kExitUsage;
  }
  std::optional<uint64_t> seconds = 0;  // 0: forever
  if (cl->has("seconds")) seconds = app::parse_uint(cl->get("seconds", ""), 1, 1u << 30);
  if (!seconds) {
    fmt::print(stderr, "hello_server: --seconds wants a positive integer\n");
    return app::kExitUsage;
  }
  const std::string uri = cl->get("uri", kDefaultUri);

  // Line-buffered so that a script reading our log sees each line at once.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  app::install_stop_signals();
  try {
    rpc::Nexus nexus(rpc::NexusConfig{.uri = uri});
    if (auto ok = nexus.register_handler(kHelloReqType, handle_hello); !ok) {
      fmt::print(stderr, "hello_server: {}\n", ok.error());
      return app::kExitFailure;
    }
    rpc::Rpc rpc(nexus, rpc::RpcConfig{.rpc_id = 0});
    fmt::print("hello_server listening on {} (rpc 0, transport {})\n", nexus.uri(),
               rpc.transport_name());

    using Clock = std::chrono::steady_clock;
    const auto end = Clock::now() + std::chrono::seconds(*seconds);
    while (!app::g_stop_requested.load(std::memory_order_relaxed) &&
           (*seconds == 0 || Clock::now() < end)) {
      rpc.run_event_loop(std::chrono::milliseconds(100));
    }
    fmt::print("hello_server: served {} requests\n", rpc.stats().handlers_run);
  } catch (const rpc::Error& e) {
    fmt::print(stderr, "hello_server: cannot serve on {}: {}\n", uri, e.what());
    return app::kExitFailure;
  }
  return app::kExitOk;
}
