// Helpers shared by the example applications: the transport options every
// app takes (CLI11; parsing with exit status 2 on a usage error is
// tools/measure/cli.h's), the client's default address, and stopping on
// SIGINT/SIGTERM. (Connecting and blocking calls are the
// library's: Rpc::connect, rpc::call_sync.) Header-only.
#pragma once

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <string>

#include "librpc/rpc_all.h"

namespace app {

// Exit codes of every app.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  // connect failed, timeout, bad response

// The transport settings every app takes (RpcConfig::transport and the
// transport-specific choices).
struct TransportOptions {
  std::string transport = "udp";
  std::string fabric_provider;
  std::string verbs_device;

  rpc::RpcConfig rpc_config(rpc::RpcId id) const {
    rpc::RpcConfig config{.rpc_id = id, .transport = transport};
    config.fabric_provider = fabric_provider;
    config.verbs_device = verbs_device;
    // The apps parse and store requests straight from the request buffer:
    // over samehost, a private copy keeps a hostile client on the host
    // from rewriting one while it is parsed (docs/transports.md).
    config.samehost_copy_rx = true;
    return config;
  }
};

// Adds --transport, --fabric-provider and --verbs-device to `cli`.
inline void add_transport_options(CLI::App& cli, TransportOptions& t) {
  cli.add_option("--transport", t.transport,
                 "transport: udp, samehost (two processes on one host), verbs (RDMA) or fabric "
                 "(libfabric)")
      ->check(CLI::IsMember({"udp", "samehost", "verbs", "fabric"}))
      ->capture_default_str();
  cli.add_option("--fabric-provider", t.fabric_provider,
                 "fabric: the libfabric provider (efa, tcp;ofi_rxm, shm; default: the first "
                 "RDM provider)");
  cli.add_option("--verbs-device", t.verbs_device,
                 "verbs: the RDMA device, as ibv_devices names it (default: the first with an "
                 "active port)");
}

// The local IPv4 address the kernel would use to reach server_uri's host
// ("host:port"): a connected UDP socket sends nothing, and getsockname says
// which address it took. The same choice as the benchmarks'
// (bench/common/connect.cc); a Nexus needs a concrete address, and
// 127.0.0.1 would not be reachable from another host.
inline rpc::Result<std::string> local_address_towards(const std::string& server_uri) {
  const auto colon = server_uri.rfind(':');
  if (colon == std::string::npos) return rpc::Failure{"'" + server_uri + "' is not HOST:PORT"};
  const std::string host = server_uri.substr(0, colon);
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), server_uri.c_str() + colon + 1, &hints, &res);
      rc != 0) {
    return rpc::Failure{"cannot resolve '" + host + "': " + ::gai_strerror(rc)};
  }
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  int rc = fd < 0 ? -1 : ::connect(fd, res->ai_addr, res->ai_addrlen);
  sockaddr_in local{};
  socklen_t len = sizeof local;
  if (rc == 0) rc = ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len);
  const int err = errno;
  ::freeaddrinfo(res);
  if (fd >= 0) ::close(fd);
  if (rc != 0) return rpc::Failure{"no route to " + server_uri + ": " + std::strerror(err)};
  char buf[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &local.sin_addr, buf, sizeof buf);
  return std::string(buf);
}

// Set by SIGINT and SIGTERM once install_stop_signals() has run. A lock-free
// atomic is what a signal handler may touch.
inline std::atomic<bool> g_stop_requested{false};
static_assert(std::atomic<bool>::is_always_lock_free);

inline void install_stop_signals() {
  auto on_signal = [](int) { g_stop_requested.store(true, std::memory_order_relaxed); };
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
}

}  // namespace app
