// Client-side setup shared by the benchmarks: the Rpc configuration, the
// client Nexus address, and opening sessions and waiting until they connect.
#pragma once

#include <chrono>
#include <span>
#include <string>

#include "common/args.h"
#include "librpc/rpc_all.h"

namespace bench {

// A session that has not connected after this long (the Nexus retries every
// sm_retry_ms) means the server is not there.
inline constexpr auto kConnectTimeout = std::chrono::seconds(5);

// What a client Rpc's session callback saw. Written on the Rpc's thread and
// read there; it must outlive the Rpc.
struct ConnectWatch {
  bool failed = false;  // a connect failed
  rpc::SessionNum failed_session = rpc::kInvalidSessionNum;
  rpc::SmErr reason = rpc::SmErr::kNone;
  std::size_t resets = 0;  // sessions the remote reset
};

// RpcConfig of ep's transport and MTU. With a watch, the session callback
// records connect failures and resets in it.
rpc::RpcConfig make_rpc_config(const EndpointOptions& ep, rpc::RpcId id,
                               ConnectWatch* watch = nullptr);

// Prints "transport T: <what it chose>" (verbs: device, port, GID and why
// that GID; fabric: the provider) to stdout, for the first Rpc of the
// process only; nothing on udp. Any thread.
void print_transport_choice(const rpc::Rpc& rpc);

// The local IPv4 address the kernel would use to reach server_uri's host
// (a connected UDP socket sends nothing): librpc needs a concrete address,
// not 0.0.0.0. Throws RunError.
std::string local_address_towards(const std::string& server_uri);

// Client mode's Nexus URI: --client-uri, or the address towards the server
// with port 0.
std::string client_nexus_uri(const EndpointOptions& ep);

// The Nexus configuration of every benchmark: `uri`, no background
// threads, and ep's session-management and failure timeouts (0: the
// library's defaults).
rpc::NexusConfig make_nexus_config(const EndpointOptions& ep, std::string uri);

// A client session and the server Rpc it goes to.
struct ClientSession {
  rpc::SessionNum num = rpc::kInvalidSessionNum;
  rpc::RpcId remote_id = 0;
};

// Starts connecting a session to Rpc remote_id at uri. Throws RunError.
ClientSession start_session(rpc::Rpc& rpc, const std::string& uri, rpc::RpcId remote_id);

// Drives rpc until every session is connected. Throws RunError naming the
// server Rpc when one fails, or after kConnectTimeout.
void wait_connected(rpc::Rpc& rpc, std::span<const ClientSession> sessions,
                    const ConnectWatch& watch, const std::string& uri);

// Destroys the sessions (failing anything still outstanding) and runs the
// event loop briefly so the disconnects reach the server before the Rpc
// goes away. Failures are ignored: this is teardown.
void close_sessions(rpc::Rpc& rpc, std::span<const ClientSession> sessions);

}  // namespace bench
