// hello_server: the first librpc program. Answers every request of type
// kHelloReqType with "hello", from Rpc 0 of a Nexus at --uri, until
// interrupted (SIGINT/SIGTERM) or for --seconds.
//
//   librpc-hello-server [--uri HOST:PORT] [--seconds N] [--transport udp|verbs|fabric]
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <string_view>

#include "app_common.h"
#include "cli.h"
#include "librpc/rpc_all.h"

namespace {

constexpr rpc::ReqType kHelloReqType = 1;
constexpr std::string_view kHello = "hello";

// Foreground handler: the response fits in the preallocated buffer.
void handle_hello(rpc::ReqHandle& h) {
  rpc::MsgBuffer& resp = h.pre_resp_buffer();
  std::copy(kHello.begin(), kHello.end(), resp.data());
  resp.resize(kHello.size());
  h.rpc().enqueue_response(h, resp);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App cli("Answers every request of type 1 with \"hello\", from Rpc 0.",
               "librpc-hello-server");
  std::string uri = "127.0.0.1:31850";
  uint64_t seconds = 0;  // 0: until SIGINT/SIGTERM
  app::TransportOptions transport;
  cli.add_option("--uri", uri, "address HOST:PORT of this server's Nexus")->capture_default_str();
  cli.add_option("--seconds", seconds, "stop after N seconds (default: run until SIGINT/SIGTERM)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 30));
  app::add_transport_options(cli, transport);
  if (auto status = measure::parse_command_line(cli, argc, argv)) return *status;

  // Line-buffered so that a script reading our log sees each line at once.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  app::install_stop_signals();
  try {
    rpc::Nexus nexus(rpc::NexusConfig{.uri = uri});
    if (auto ok = nexus.register_handler(kHelloReqType, handle_hello); !ok) {
      fmt::print(stderr, "hello_server: {}\n", ok.error());
      return app::kExitFailure;
    }
    rpc::Rpc rpc(nexus, transport.rpc_config(0));
    fmt::print("hello_server listening on {} (rpc 0, transport {})\n", nexus.uri(),
               rpc.transport_name());

    using Clock = std::chrono::steady_clock;
    const auto end = Clock::now() + std::chrono::seconds(seconds);
    while (!app::g_stop_requested.load(std::memory_order_relaxed) &&
           (seconds == 0 || Clock::now() < end)) {
      rpc.run_event_loop(std::chrono::milliseconds(100));
    }
    fmt::print("hello_server: served {} requests\n", rpc.stats().handlers_run);
  } catch (const rpc::Error& e) {
    fmt::print(stderr, "hello_server: cannot serve on {}: {}\n", uri, e.what());
    return app::kExitFailure;
  }
  return app::kExitOk;
}
