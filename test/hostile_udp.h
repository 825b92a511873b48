// A hostile peer over udp on 127.0.0.x for tests: a plain UDP socket, and
// the packets and session-management messages it forges or sends as a
// client that completes the handshake itself (test_blaster.cc,
// test_budgets.cc).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>
#include <fstream>
#include <string>
#include <system_error>
#include <vector>

#include "librpc/rpc_all.h"
#include "rpc/impl_access.h"
#include "rpc/rpc_impl.h"
#include "test_util.h"
#include "transport/registry.h"
#include "transport/udp/udp_transport.h"
#include "wire/pkt_hdr.h"
#include "wire/sm_msg.h"

namespace rpc::test::hostile {

using namespace rpc::detail;

inline uint16_t port_of_uri(const std::string& uri) {
  return static_cast<uint16_t>(std::stoi(uri.substr(uri.rfind(':') + 1)));
}

inline uint16_t datapath_port(Rpc& rpc) {
  return static_cast<UdpTransport&>(impl_of(rpc).transport()).local_port();
}

// Resident set size of this process, from /proc/self/statm.
inline size_t rss_bytes() {
  std::ifstream statm("/proc/self/statm");
  size_t pages_total = 0, pages_resident = 0;
  statm >> pages_total >> pages_resident;
  return pages_resident * static_cast<size_t>(::sysconf(_SC_PAGESIZE));
}

// A plain UDP socket on 127.0.0.1: the attacker. Built on the blaster's
// own thread too, where Catch2 assertions are not allowed (they are not
// thread-safe; TSan flagged it): failures throw instead.
class UdpSock {
 public:
  // Bound to 127.0.0.1 by default; another loopback address (127.0.0.2)
  // is another host to the server.
  explicit UdpSock(uint32_t ipv4 = INADDR_LOOPBACK) : ipv4_(ipv4) {
    fd_ = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) throw std::system_error(errno, std::generic_category(), "socket");
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(ipv4_);
    socklen_t len = sizeof(addr);
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      const int e = errno;
      ::close(fd_);
      throw std::system_error(e, std::generic_category(), "bind/getsockname");
    }
    port_ = ntohs(addr.sin_port);
  }
  ~UdpSock() { ::close(fd_); }
  UdpSock(const UdpSock&) = delete;
  UdpSock& operator=(const UdpSock&) = delete;

  uint16_t port() const { return port_; }
  void send(uint16_t to_port, const void* data, size_t len) const {
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    to.sin_port = htons(to_port);
    (void)::sendto(fd_, data, len, 0, reinterpret_cast<sockaddr*>(&to), sizeof(to));
  }
  void send(uint16_t to_port, const std::vector<uint8_t>& bytes) const {
    send(to_port, bytes.data(), bytes.size());
  }
  // One datagram, waiting up to timeout; its size, or -1 if none came.
  ssize_t recv(uint8_t* buf, size_t cap, std::chrono::milliseconds timeout) const {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return -1;
    return ::recv(fd_, buf, cap, MSG_DONTWAIT);
  }

 private:
  uint32_t ipv4_;
  int fd_ = -1;
  uint16_t port_ = 0;
};

inline std::vector<uint8_t> pkt(const PktHdr& h, size_t data_len, uint8_t fill = 0x5A) {
  std::vector<uint8_t> b(kPktHeaderBytes + data_len, fill);
  h.store(b.data());
  return b;
}

inline PktHdr req_hdr(uint32_t msg_size, SessionNum sn, uint16_t pkt_num = 0,
                      uint64_t req_num = 0) {
  return PktHdr::make(PktType::kReq, kEcho, msg_size, sn, pkt_num, req_num);
}

inline std::vector<uint8_t> sm_bytes(const SmMsg& m) {
  std::array<uint8_t, kSmMsgBytes> b{};
  encode_sm_msg(m, b);
  return {b.begin(), b.end()};
}

inline RoutingInfo udp_route(uint16_t port, uint16_t magic = kUdpRoutingMagic,
                             uint32_t ipv4 = INADDR_LOOPBACK) {
  RoutingInfo r;
  const UdpRoutingInfo u{htonl(ipv4), htons(port), magic};
  std::memcpy(r.bytes.data(), &u, sizeof(u));
  return r;
}

// Data bytes per packet of a udp Rpc with the default mtu_bytes (1500):
// less the IPv4 and UDP headers and ours. A connect must name it.
constexpr uint32_t kUdpDefaultDataPerPkt = 1500 - 20 - 8 - kPktHeaderBytes;

// A well-formed connect request, as a client Nexus would send it.
inline SmMsg connect_req(uint64_t token, uint16_t reply_port, SessionNum client_sn,
                         uint64_t incarnation = 0x5EED, uint32_t ipv4 = INADDR_LOOPBACK) {
  SmMsg m;
  m.type = SmMsgType::kConnectReq;
  m.transport = rpc::detail::transport_wire_id("udp");
  m.client_rpc_id = 0;
  m.server_rpc_id = 1;
  m.client_session_num = client_sn;
  m.token = token;
  m.incarnation = incarnation;
  m.routing = udp_route(reply_port, kUdpRoutingMagic, ipv4);
  m.routing_len = RoutingInfo::kMaxBytes;
  m.max_data_per_pkt = kUdpDefaultDataPerPkt;
  m.session_credits = static_cast<uint16_t>(RpcConfig{}.session_credits);  // a default client's ask
  return m;
}

}  // namespace rpc::test::hostile
