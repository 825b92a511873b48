// The `udp` transport: one nonblocking kernel UDP socket per Rpc, sendmmsg
// and recvmmsg batching, busy-polled. Routing info is IPv4 address + port.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <array>
#include <string>
#include <vector>

#include "transport/transport.h"

namespace rpc::detail {

// Layout of udp routing info inside RoutingInfo::bytes.
struct UdpRoutingInfo {
  uint32_t ipv4_be;  // network byte order
  uint16_t port_be;  // network byte order
  uint16_t magic;    // kUdpRoutingMagic: rejects info from another transport
};
inline constexpr uint16_t kUdpRoutingMagic = 0x5544;  // "UD"
static_assert(sizeof(UdpRoutingInfo) <= RoutingInfo::kMaxBytes);

class UdpTransport final : public Transport {
 public:
  // Binds a socket to bind_ip, ephemeral port. Throws rpc::Error.
  UdpTransport(const RpcConfig& config, const std::string& bind_ip);
  ~UdpTransport() override;

  const char* name() const override { return "udp"; }
  TransportCaps caps() const override { return caps_; }
  void tx_burst(std::span<const TxItem> items) override;
  void tx_flush() override {}
  size_t rx_burst(std::span<RxPacket> out) override;
  void post_recvs(size_t n) override;
  void fill_local_routing_info(RoutingInfo& out) const override;
  bool resolve_remote_routing_info(RoutingInfo& info) override;
  uint64_t src_key_of(const RoutingInfo& resolved) const override;
  Result<MemReg> register_memory(void* addr, size_t len) override;
  void deregister_memory(const MemReg& reg) override;
  bool post_read(const BulkOp&) override { return false; }
  bool post_write(const BulkOp&) override { return false; }
  size_t poll_bulk(std::span<BulkCompletion>) override { return 0; }

  uint16_t local_port() const;  // host byte order

  static constexpr size_t kMaxBatch = 32;  // datagrams per sendmmsg/recvmmsg

 private:
  TransportCaps caps_;
  int fd_ = -1;
  sockaddr_in local_addr_{};
  // RX ring: rx_ring_size buffers of max_pkt_bytes, filled in order.
  std::vector<uint8_t> ring_mem_;
  std::vector<sockaddr_in> ring_src_;
  // One recvmmsg descriptor per ring buffer, built once: rx_burst only
  // resets the fields the kernel overwrites.
  std::vector<mmsghdr> ring_msgs_;
  std::vector<iovec> ring_iovs_;
  // sendmmsg descriptors, wired to their iovecs and addresses once.
  std::array<mmsghdr, kMaxBatch> tx_msgs_{};
  std::array<std::array<iovec, 2>, kMaxBatch> tx_iovs_{};
  std::array<sockaddr_in, kMaxBatch> tx_dsts_{};
  size_t ring_head_ = 0;
  size_t ring_in_use_ = 0;
  // Empty polls in a row; from kIdlePolls on, rx_burst polls with
  // recvfrom. A stream's gaps are shorter; a request/response wait longer.
  static constexpr uint32_t kIdlePolls = 4;
  uint32_t rx_empty_polls_ = kIdlePolls;
};

}  // namespace rpc::detail
