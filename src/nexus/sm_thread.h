// The session-management thread: one asio io_context serving the Nexus's
// UDP socket. Receives and validates SM messages, hands them to Rpcs,
// retransmits outstanding requests and times them out.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>

#include "common/net_addr.h"
#include "wire/sm_msg.h"

namespace rpc::detail {

class NexusImpl;

struct SmThreadStats {
  std::atomic<uint64_t> rx_msgs{0};
  std::atomic<uint64_t> rx_dropped{0};  // failed decode, unexpected or forged
  std::atomic<uint64_t> retransmissions{0};
  std::atomic<uint64_t> timeouts{0};
  std::atomic<uint64_t> heartbeats_sent{0};
  std::atomic<uint64_t> remote_failures{0};
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
  void send_request(const SmMsg& msg, const NetAddr& to);
  void send_response(const SmMsg& msg, const NetAddr& to);
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
