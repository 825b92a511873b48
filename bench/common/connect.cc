// Client-side setup shared by the benchmarks.
#include "common/connect.h"

#include <arpa/inet.h>
#include <fmt/core.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace bench {

rpc::RpcConfig make_rpc_config(const EndpointOptions& ep, rpc::RpcId id, ConnectWatch* watch) {
  rpc::RpcConfig config;
  config.rpc_id = id;
  config.transport = ep.transport;
  config.mtu_bytes = ep.mtu;
  config.verbs_device = ep.verbs_device;
  config.verbs_gid_index = ep.gid_index;
  config.verbs_bulk = ep.verbs_bulk;
  config.udp_offload = ep.udp_offload;
  config.fabric_provider = ep.fabric_provider;
  if (ep.bulk_threshold_bytes != 0) config.bulk_threshold_bytes = ep.bulk_threshold_bytes;
  if (ep.session_credits != 0) config.session_credits = ep.session_credits;
  if (ep.congestion_control) config.congestion_control = *ep.congestion_control;
  if (ep.cc_link_gbps != 0) config.cc_link_gbps = ep.cc_link_gbps;
  if (ep.cc_t_low_us != 0) config.cc_t_low_us = ep.cc_t_low_us;
  if (ep.cc_t_high_us != 0) config.cc_t_high_us = ep.cc_t_high_us;
  if (watch != nullptr) {
    config.session_callback = [watch](rpc::SessionNum sn, rpc::SessionEvent event, rpc::SmErr err) {
      if (event == rpc::SessionEvent::kConnectFailed && !watch->failed) {
        watch->failed = true;
        watch->failed_session = sn;
        watch->reason = err;
      } else if (event == rpc::SessionEvent::kReset) {
        ++watch->resets;
      }
    };
  }
  return config;
}

void print_transport_choice(const rpc::Rpc& rpc) {
  static std::atomic<bool> printed{false};
  const std::string provider = rpc.transport_provider();
  if (provider.empty() || printed.exchange(true)) return;
  fmt::print("transport {}: {}\n", rpc.transport_name(), provider);
  std::fflush(stdout);
}

std::string local_address_towards(const std::string& server_uri) {
  const auto colon = server_uri.rfind(':');
  const std::string host = server_uri.substr(0, colon);
  const std::string port = server_uri.substr(colon + 1);
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0) {
    throw RunError(fmt::format("cannot resolve '{}': {}", host, ::gai_strerror(rc)));
  }
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    ::freeaddrinfo(res);
    throw RunError(fmt::format("socket: {}", std::strerror(errno)));
  }
  const int rc = ::connect(fd, res->ai_addr, res->ai_addrlen);
  const int connect_errno = errno;
  ::freeaddrinfo(res);
  sockaddr_in local{};
  socklen_t len = sizeof local;
  if (rc != 0 || ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) != 0) {
    const int err = rc != 0 ? connect_errno : errno;
    ::close(fd);
    throw RunError(
        fmt::format("no route to {}: {}; give --client-uri", server_uri, std::strerror(err)));
  }
  ::close(fd);
  char buf[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &local.sin_addr, buf, sizeof buf);
  return buf;
}

std::string client_nexus_uri(const EndpointOptions& ep) {
  return ep.client_uri ? *ep.client_uri : local_address_towards(*ep.server_uri) + ":0";
}

ClientSession start_session(rpc::Rpc& rpc, const std::string& uri, rpc::RpcId remote_id) {
  auto sn = rpc.create_session(uri, remote_id);
  if (!sn) throw RunError(fmt::format("create_session {} rpc {}: {}", uri, remote_id, sn.error()));
  return ClientSession{*sn, remote_id};
}

void wait_connected(rpc::Rpc& rpc, std::span<const ClientSession> sessions,
                    const ConnectWatch& watch, const std::string& uri) {
  const auto deadline = std::chrono::steady_clock::now() + kConnectTimeout;
  for (const ClientSession& s : sessions) {
    while (!rpc.is_connected(s.num)) {
      if (watch.failed) {
        rpc::RpcId failed_id = s.remote_id;
        for (const ClientSession& f : sessions) {
          if (f.num == watch.failed_session) failed_id = f.remote_id;
        }
        throw RunError(fmt::format("cannot connect to rpc {} at {}: {}", failed_id, uri,
                                   rpc::to_string(watch.reason)));
      }
      if (std::chrono::steady_clock::now() > deadline) {
        throw RunError(fmt::format("cannot connect to rpc {} at {} within {} s", s.remote_id, uri,
                                   kConnectTimeout.count()));
      }
      rpc.run_event_loop_once();
    }
  }
}

void close_sessions(rpc::Rpc& rpc, std::span<const ClientSession> sessions) {
  for (const ClientSession& s : sessions) (void)rpc.destroy_session(s.num);
  rpc.run_event_loop(std::chrono::milliseconds(10));
}

rpc::NexusConfig make_nexus_config(const EndpointOptions& ep, std::string uri) {
  rpc::NexusConfig config{.uri = std::move(uri), .num_bg_threads = 0};
  if (ep.sm_timeout_ms > 0) config.sm_timeout_ms = ep.sm_timeout_ms;
  if (ep.failure_timeout_ms > 0) config.failure_timeout_ms = ep.failure_timeout_ms;
  return config;
}

}  // namespace bench
