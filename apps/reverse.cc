// reverse: the libfabric tutorial's "reverse" program on librpc. The server
// answers each message with its bytes in reverse order; the client sends
// one message, prints the answer and checks it.
//
//   librpc-reverse server [--uri HOST:PORT] [--transport udp|verbs|fabric]
//   librpc-reverse client ADDRESS [MESSAGE | -] [--uri HOST:PORT] [--transport ...]
//
// MESSAGE "-" reads the message from standard input, for messages larger
// than a command-line argument may be (up to Rpc::max_msg_size()).
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>
#include <string_view>

#include "app_common.h"
#include "cli.h"
#include "librpc/rpc_all.h"

namespace {

constexpr rpc::ReqType kReverseReqType = 1;
constexpr rpc::RpcId kServerRpcId = 0;
// Messages longer than this are shown abbreviated.
constexpr size_t kMaxShownBytes = 64;
constexpr auto kConnectBackstop = std::chrono::seconds(10);
constexpr auto kRequestTimeout = std::chrono::seconds(10);

std::string_view as_text(const rpc::MsgBuffer& buf, size_t size) {
  return {reinterpret_cast<const char*>(buf.data()), size};
}

// The message quoted with `quote`, abbreviated when long.
std::string shown(std::string_view msg, char quote) {
  if (msg.size() <= kMaxShownBytes) return fmt::format("{}{}{}", quote, msg, quote);
  return fmt::format("{}{}...{} ({} bytes)", quote, msg.substr(0, kMaxShownBytes), quote,
                     msg.size());
}

// Foreground handler. The request may live in the RX ring, valid only
// until we return, so the response is built here.
void handle_reverse(rpc::ReqHandle& h) {
  const rpc::MsgBuffer& req = h.request();
  const size_t size = req.size();
  rpc::MsgBuffer* resp = &h.pre_resp_buffer();
  rpc::MsgBuffer large;
  if (size > resp->max_size()) {
    // The Rpc owns it once enqueued: it keeps it, charged to the client's
    // share of its receive budget, until the slot's next request (a lost
    // answer is sent again from it), and frees it then.
    large = h.rpc().alloc_msg_buffer(size);
    if (!large.valid()) {
      // Answer with an empty message rather than leave the client waiting;
      // it reports the size mismatch.
      fmt::print(stderr, "reverse server: cannot allocate a {}-byte response\n", size);
      resp->resize(0);
      h.rpc().enqueue_response(h, *resp);
      return;
    }
    resp = &large;
  }
  std::reverse_copy(req.data(), req.data() + size, resp->data());
  resp->resize(size);
  fmt::print("reversed: {} -> {}\n", shown(as_text(req, size), '\''),
             shown(as_text(*resp, size), '\''));
  h.rpc().enqueue_response(h, *resp);
}

int run_server(const std::string& uri, const app::TransportOptions& transport) {
  // Line-buffered so that a script reading our log sees each line at once.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  rpc::Nexus nexus(rpc::NexusConfig{.uri = uri});
  if (auto ok = nexus.register_handler(kReverseReqType, handle_reverse); !ok) {
    fmt::print(stderr, "reverse server: {}\n", ok.error());
    return app::kExitFailure;
  }
  rpc::Rpc rpc(nexus, transport.rpc_config(0));
  fmt::print("reverse server listening on {} (rpc 0, transport {}, messages up to {} bytes)\n",
             nexus.uri(), rpc.transport_name(), rpc.max_msg_size());
  while (!app::g_stop_requested.load(std::memory_order_relaxed)) {
    rpc.run_event_loop(std::chrono::milliseconds(100));
  }
  fmt::print("reverse server: served {} requests\n", rpc.stats().handlers_run);
  return app::kExitOk;
}

int run_client(const std::string& server, std::string uri, const std::string& message,
               const app::TransportOptions& transport) {
  if (uri.empty()) {
    auto local = app::local_address_towards(server);
    if (!local) {
      fmt::print(stderr, "reverse client: {}; give --uri\n", local.error());
      return app::kExitFailure;
    }
    uri = *local + ":0";  // port 0: ephemeral
  }
  rpc::Nexus nexus(rpc::NexusConfig{.uri = uri});
  rpc::Rpc rpc(nexus, transport.rpc_config(0));
  if (message.size() > rpc.max_msg_size()) {
    fmt::print(stderr, "reverse client: the message has {} bytes; at most {} fit in one RPC\n",
               message.size(), rpc.max_msg_size());
    return app::kExitFailure;
  }
  auto sn = rpc.connect(server, kServerRpcId, kConnectBackstop);
  if (!sn) {
    fmt::print(stderr, "reverse client: cannot connect to rpc {} at {}: {}\n", kServerRpcId, server,
               sn.error());
    return app::kExitFailure;
  }

  rpc::OwnedBuffer req(rpc, message.size());
  rpc::OwnedBuffer resp(rpc, message.size());
  if (!req.valid() || !resp.valid()) {
    fmt::print(stderr, "reverse client: cannot allocate {}-byte buffers\n", message.size());
    return app::kExitFailure;
  }
  std::copy(message.begin(), message.end(), req.data());
  fmt::print("sent: {}\n", shown(message, '"'));

  const rpc::CallResult got = rpc::call_sync(rpc, *sn, kReverseReqType, req, resp, kRequestTimeout);
  if (!got.ok()) {
    fmt::print(stderr, "reverse client: request to {} failed: {}\n", server,
               rpc::to_string(got.errc));
    return app::kExitFailure;
  }
  const std::string_view received = as_text(resp, got.resp_size);
  fmt::print("received: {}\n", shown(received, '"'));
  if (!std::equal(message.rbegin(), message.rend(), received.begin(), received.end())) {
    fmt::print(stderr, "reverse client: the response is not the message reversed\n");
    return app::kExitFailure;
  }
  return app::kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App cli(
      "The libfabric tutorial's reverse program: the server answers each message with its bytes "
      "in reverse order; the client sends one message, prints the answer and checks it.",
      "librpc-reverse");
  cli.require_subcommand(1);
  app::TransportOptions transport;

  CLI::App* server_cmd = cli.add_subcommand("server", "answer each message reversed");
  std::string server_uri = "127.0.0.1:31851";
  server_cmd->add_option("--uri", server_uri, "this server's Nexus address HOST:PORT")
      ->capture_default_str();
  app::add_transport_options(*server_cmd, transport);

  CLI::App* client_cmd = cli.add_subcommand("client", "send one message and check the answer");
  std::string address;
  std::string message = "Hello, world!";
  std::string client_uri;  // empty: the local address that routes to the server, port 0
  client_cmd->add_option("ADDRESS", address, "the server's address HOST:PORT")->required();
  client_cmd
      ->add_option("MESSAGE", message,
                   "the message; \"-\" reads standard input, for messages larger than a "
                   "command-line argument may be (up to Rpc::max_msg_size())")
      ->capture_default_str();
  client_cmd->add_option("--uri", client_uri,
                         "this client's Nexus address HOST:PORT (default: the local address "
                         "that routes to the server, port 0)");
  app::add_transport_options(*client_cmd, transport);
  if (auto status = measure::parse_command_line(cli, argc, argv)) return *status;

  app::install_stop_signals();
  const char* mode = server_cmd->parsed() ? "server" : "client";
  try {
    if (server_cmd->parsed()) return run_server(server_uri, transport);
    if (message == "-") {
      message.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
    }
    return run_client(address, client_uri, message, transport);
  } catch (const rpc::Error& e) {
    fmt::print(stderr, "reverse {}: {}\n", mode, e.what());
    return app::kExitFailure;
  }
}
