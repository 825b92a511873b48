// The nonblocking IPv4 UDP socket the raw UDP baselines busy-poll, and the
// errno values they retry on.
#pragma once

#include <netinet/in.h>

#include <string_view>

namespace baseline {

// errno values after which a nonblocking call is simply tried again
// (EAGAIN, EINTR, ENOBUFS: a full device queue).
bool is_transient(int err);

// A nonblocking IPv4 UDP socket with buffer_bytes send and receive buffers
// (beyond net.core.*mem_max when we may: root); owns the descriptor.
// Throws RunError.
class UdpSocket {
 public:
  explicit UdpSocket(int buffer_bytes);
  ~UdpSocket();
  UdpSocket(const UdpSocket&) = delete;
  UdpSocket& operator=(const UdpSocket&) = delete;

  int fd() const { return fd_; }
  void bind(const sockaddr_in& addr);
  sockaddr_in local_addr() const;
  // Sets a UDP-level (SOL_UDP) option for --offload on (udp_stream's UDP
  // GSO/GRO). Throws RunError naming the option and the Linux version that
  // has it when the kernel refuses: a run must not measure the plain path
  // under the offload's name.
  void require_udp_option(int option, int value, std::string_view name, std::string_view since);

 private:
  int fd_ = -1;
};

}  // namespace baseline
