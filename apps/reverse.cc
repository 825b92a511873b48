// reverse: the libfabric tutorial's "reverse" program on librpc. The server
// answers each message with its bytes in reverse order; the client sends
// one message, prints the answer and checks it.
//
//   reverse server [--uri HOST:PORT]
//   reverse client ADDRESS [MESSAGE | -] [--uri HOST:PORT]
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
#include "librpc/rpc_all.h"

namespace {

constexpr std::string_view kDefaultServerUri = "127.0.0.1:31851";
constexpr std::string_view kDefaultClientUri = "127.0.0.1:0";  // port 0: ephemeral
constexpr std::string_view kDefaultMessage = "Hello, world!";
constexpr rpc::ReqType kReverseReqType = 1;
constexpr rpc::RpcId kServerRpcId = 0;
// Messages longer than this are shown abbreviated.
constexpr size_t kMaxShownBytes = 64;
constexpr auto kConnectBackstop = std::chrono::seconds(10);
constexpr auto kRequestTimeout = std::chrono::seconds(10);

void usage(std::FILE* out) {
  fmt::print(out,
             "usage: reverse server [--uri HOST:PORT]\n"
             "       reverse client ADDRESS [MESSAGE | -] [--uri HOST:PORT]\n"
             "  server: answers each message reversed; --uri is its address (default {})\n"
             "  client: sends MESSAGE (default \"{}\"; \"-\" reads standard input) to the\n"
             "          server at ADDRESS (host:port); --uri is the client's own address\n"
             "          (default {})\n",
             kDefaultServerUri, kDefaultMessage, kDefaultClientUri);
}

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
    large = h.rpc().alloc_msg_buffer(size);  // the Rpc frees it after sending
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

int run_server(const std::string& uri) {
  // Line-buffered so that a script reading our log sees each line at once.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  rpc::Nexus nexus(rpc::NexusConfig{.uri = uri});
  if (auto ok = nexus.register_handler(kReverseReqType, handle_reverse); !ok) {
    fmt::print(stderr, "reverse server: {}\n", ok.error());
    return app::kExitFailure;
  }
  rpc::Rpc rpc(nexus, rpc::RpcConfig{.rpc_id = 0});
  fmt::print("reverse server listening on {} (rpc 0, transport {}, messages up to {} bytes)\n",
             nexus.uri(), rpc.transport_name(), rpc.max_msg_size());
  while (!app::g_stop_requested.load(std::memory_order_relaxed)) {
    rpc.run_event_loop(std::chrono::milliseconds(100));
  }
  fmt::print("reverse server: served {} requests\n", rpc.stats().handlers_run);
  return app::kExitOk;
}

int run_client(const std::string& server, const std::string& uri, const std::string& message) {
  rpc::Nexus nexus(rpc::NexusConfig{.uri = uri});
  rpc::Rpc rpc(nexus, rpc::RpcConfig{.rpc_id = 0});
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
  const std::string_view mode = argc >= 2 ? argv[1] : "";
  if (mode == "-h" || mode == "--help") {
    usage(stdout);
    return app::kExitOk;
  }
  auto cl = app::parse_command_line(argc, argv, 2, {"uri"});
  const bool server_args = mode == "server" && cl && cl->positional.empty();
  const bool client_args =
      mode == "client" && cl && (cl->positional.size() == 1 || cl->positional.size() == 2);
  if (cl && cl->help) {
    usage(stdout);
    return app::kExitOk;
  }
  if (!server_args && !client_args) {
    if (!cl) fmt::print(stderr, "reverse: {}\n", cl.error());
    usage(stderr);
    return app::kExitUsage;
  }

  app::install_stop_signals();
  try {
    if (server_args) return run_server(cl->get("uri", kDefaultServerUri));
    std::string message(kDefaultMessage);
    if (cl->positional.size() == 2) message = cl->positional[1];
    if (message == "-") {
      message.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
    }
    return run_client(cl->positional[0], cl->get("uri", kDefaultClientUri), message);
  } catch (const rpc::Error& e) {
    fmt::print(stderr, "reverse {}: {}\n", mode, e.what());
    return app::kExitFailure;
  }
}
