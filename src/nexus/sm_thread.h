// The session-management thread: one asio io_context serving the Nexus's
// UDP socket. Receives and validates SM messages, hands them to Rpcs,
// retransmits outstanding requests and times them out, watches remote
// Nexuses (heartbeats) and confirms their restarts (probes).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>

#include "common/net_addr.h"
#include "librpc/stats.h"
#include "wire/sm_msg.h"

namespace rpc::detail {

class NexusImpl;

// The counters behind NexusStats (librpc/stats.h says what each counts).
struct SmThreadStats {
  std::atomic<uint64_t> rx_msgs{0};
  std::atomic<uint64_t> rx_dropped{0};   // failed decode, unexpected response, incarnation 0
  std::atomic<uint64_t> rx_rejected{0};  // decoded, but a request no Rpc could accept
  std::atomic<uint64_t> retransmissions{0};
  std::atomic<uint64_t> timeouts{0};
  std::atomic<uint64_t> heartbeats_sent{0};
  std::atomic<uint64_t> remote_failures{0};
  // Incarnation checks (a watched remote's message carried another one).
  std::atomic<uint64_t> probes_sent{0};            // first transmissions, not retries
  std::atomic<uint64_t> probes_answered{0};        // kProbeReq received and answered
  std::atomic<uint64_t> probe_timeouts{0};         // no valid answer: nothing changed
  std::atomic<uint64_t> incarnation_forgeries{0};  // the remote answered with the known one
  std::atomic<uint64_t> probe_resp_dropped{0};     // wrong nonce, address, or none outstanding
  // Requests the SM thread sends on behalf of an Rpc that no longer exists.
  std::atomic<uint64_t> session_resets_sent{0};
  std::atomic<uint64_t> rx_disputed{0};              // requests held back: incarnation being probed
  std::atomic<uint64_t> orphan_disconnects_sent{0};  // for connects answered after the Rpc left

  NexusStats snapshot() const;  // Nexus::stats()
};

struct SmThreadConfig {
  uint32_t retry_ms;
  uint32_t timeout_ms;
  uint32_t heartbeat_interval_ms;
  uint32_t failure_timeout_ms;
  uint64_t incarnation;  // stamped on every message this Nexus sends
};

class SmThread {
 public:
  // Binds the socket to addr (port 0: ephemeral) and starts the thread.
  // Throws rpc::Error.
  SmThread(NexusImpl& nexus, const NetAddr& addr, const SmThreadConfig& config);
  ~SmThread();  // stops and joins

  uint16_t bound_port() const;
  // Every call below is safe from any thread: it is posted to the SM thread.
  //
  // Sends msg (a request) and retransmits it until the response with the
  // same token and type arrives from `to` (delivered to Rpc
  // msg.client_rpc_id) or the timeout passes (an SmErr::kTimeout response is
  // delivered instead).
  void send_request(const SmMsg& msg, const NetAddr& to);
  void send_response(const SmMsg& msg, const NetAddr& to);
  // Like send_request, but the response and the timeout are consumed here:
  // for a kSessionResetReq whose sending Rpc is being destroyed.
  void send_owned_request(const SmMsg& msg, const NetAddr& to);
  // The Rpc that sent the connect request `token` is gone: a successful
  // answer is followed by a disconnect sent from here; nothing is delivered.
  void abandon_connect(uint64_t token);
  const SmThreadStats& stats() const;
  // Failure detection: a remote Nexus is watched (sent heartbeats, and
  // declared failed when silent) while at least one session refers to it.
  // incarnation: the remote's, when already known (else 0).
  void add_remote(const NetAddr& remote, uint64_t incarnation);
  void release_remote(const NetAddr& remote);

 private:
  struct State;
  std::unique_ptr<State> state_;
  std::thread thread_;
};

}  // namespace rpc::detail
