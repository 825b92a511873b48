// The `udp` transport: one nonblocking kernel UDP socket per Rpc, sendmmsg
// and recvmmsg batching, busy-polled. Routing info is IPv4 address + port.
// Where the kernel has them (RpcConfig::udp_offload), runs of equal-size
// packets to one peer go as one UDP GSO send, and the socket receives with
// UDP GRO: merged datagrams are split back into packets (udp_transport.cc).
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
// Resolved routing info (resolve_remote_routing_info rewrites the wire
// layout in place into this one): the sockaddr_in the TX path hands to the
// kernel, copied out as is instead of being rebuilt for every packet.
inline constexpr size_t kUdpResolvedDstOffset = 0;
static_assert(sizeof(sockaddr_in) <= RoutingInfo::kMaxBytes);

class UdpTransport final : public Transport {
 public:
  // Binds a socket to bind_ip, ephemeral port. Throws rpc::Error.
  UdpTransport(const RpcConfig& config, const std::string& bind_ip);
  ~UdpTransport() override;

  const char* name() const override { return "udp"; }
  void refresh_rx_drops() override;
  TransportCaps caps() const override { return caps_; }
  void tx_burst(std::span<const TxItem> items) override;
  size_t rx_burst(std::span<RxPacket> out) override;
  void post_recvs(size_t n) override;
  void fill_local_routing_info(RoutingInfo& out) const override;
  bool resolve_remote_routing_info(RoutingInfo& info) override;
  uint64_t src_key_of(const RoutingInfo& resolved) const override;
  Result<MemReg> register_memory(void* addr, size_t len) override;
  void deregister_memory(const MemReg& reg) override;
  bool post_read(const BulkOp&) override { return false; }
  size_t poll_bulk(std::span<BulkCompletion>) override { return 0; }

  uint16_t local_port() const;  // host byte order

  // Whether sends are segmented by the kernel (UDP_SEGMENT), and whether
  // the socket receives merged datagrams (UDP_GRO). GSO turns itself off
  // for good when a segmented send fails (a device that cannot checksum
  // it, an old kernel); the packets then go out one datagram each.
  bool gso_enabled() const { return gso_; }
  bool gro_enabled() const { return gro_; }
  // Sends that carried several packets, and merged datagrams received.
  uint64_t gso_sends() const { return gso_sends_; }
  uint64_t gro_merged_receives() const { return gro_merged_; }
  // For tests: the next segmented send fails as a kernel without GSO
  // support would make it fail (EIO), to exercise the fallback.
  void fail_next_gso_send_for_testing() { fail_next_gso_ = true; }

  static constexpr size_t kMaxBatch = 32;  // datagrams per sendmmsg/recvmmsg
  // Sends that may hit a full socket buffer (EAGAIN, ENOBUFS) or a signal
  // (EINTR) again in one tx_burst before the rest of it is dropped. Busy
  // retrying briefly beats dropping, which costs a whole RTO; retrying
  // forever would stall the event loop.
  static constexpr int kMaxTxRetries = 64;
  // The kernel's bounds on one segmented send or merged receive
  // (UDP_MAX_SEGMENTS, UDP_GRO_CNT_MAX) and its bytes (one IP datagram).
  static constexpr size_t kMaxSegments = 64;
  static constexpr size_t kMaxOffloadBytes = 65507;
  // Segmented messages are gathered into one buffer of this size per
  // sendmmsg (send_offloaded); a larger burst takes more calls.
  static constexpr size_t kGsoGatherBytes = 4 * 65536;

 private:
  TransportCaps caps_;
  int fd_ = -1;
  uint32_t kernel_drops_seen_ = 0;  // SK_MEMINFO_DROPS at the last refresh_rx_drops
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
  // The buffer at ring_head_ now holds a packet handed to the engine.
  void hand_out_ring_buffer() {
    ring_head_ = ring_head_ + 1 == caps_.rx_ring_size ? 0 : ring_head_ + 1;
    ring_in_use_++;
  }

  // --- GSO (tx_burst) ---
  void enable_offloads();
  // Out of line: inlined, their register and stack needs would make
  // tx_burst save and restore them on every single-datagram send too.
  [[gnu::noinline]] void retry_send_one(const TxItem& item);            // see send_plain
  [[gnu::noinline]] void tx_burst_many(std::span<const TxItem> items);  // see send_plain
  [[gnu::noinline]] size_t send_offloaded(std::span<const TxItem> items);
  [[gnu::noinline]] size_t send_plain(std::span<const TxItem> items);
  bool gso_ = false;
  bool fail_next_gso_ = false;
  uint64_t gso_sends_ = 0;
  // Per message of a sendmmsg: its one iovec (a slice of gso_gather_) and
  // its UDP_SEGMENT control message.
  static constexpr size_t kCmsgBytes = 24;  // CMSG_SPACE(sizeof(int)) on 64-bit Linux
  struct alignas(cmsghdr) CmsgBuf {
    uint8_t bytes[kCmsgBytes];
  };
  std::vector<uint8_t> gso_gather_;  // kGsoGatherBytes
  std::array<iovec, kMaxBatch> gso_iovs_{};
  std::array<CmsgBuf, kMaxBatch> gso_cmsgs_{};
  std::array<size_t, kMaxBatch> gso_first_item_{};  // the item each message starts at

  // --- GRO (rx_burst) ---
  // Merged datagrams are received into staging buffers of a full IP
  // datagram each and handed out there, packet by packet, in order.
  size_t rx_burst_gro(std::span<RxPacket> out);
  [[gnu::noinline]] size_t rx_burst_plain(std::span<RxPacket> out);  // see send_plain
  [[gnu::noinline]] size_t take_staged(std::span<RxPacket> out);     // see send_plain
  int receive_gro(RxPacket& first);
  [[gnu::noinline]] int stage_received(RxPacket& first, int r);  // see send_plain
  [[gnu::noinline]] bool stage(uint32_t buf_index, uint32_t len, uint32_t seg, uint64_t src_key);
  uint32_t segment_size_of(msghdr& h, uint32_t len);
  struct Staged {
    uint32_t len = 0;       // bytes received
    uint32_t seg = 0;       // packet size (the last one may be shorter)
    uint32_t consumed = 0;  // bytes already handed out
    uint64_t src_key = 0;
    uint32_t buf_index = 0;  // its staging buffer
  };
  static constexpr size_t kGroBatch = 16;  // merged datagrams per recvmmsg
  static constexpr size_t kGroBufBytes = 65536;
  bool gro_ = false;
  uint64_t gro_merged_ = 0;
  std::vector<uint8_t> stage_mem_;
  std::array<mmsghdr, kGroBatch> stage_msgs_{};
  std::array<iovec, kGroBatch> stage_iovs_{};
  std::array<iovec, 2> first_iovs_{};  // message 0's: a ring buffer, then staging buffer 0
  std::array<sockaddr_in, kGroBatch> stage_src_{};
  std::array<CmsgBuf, kGroBatch> stage_cmsgs_{};
  std::array<Staged, kGroBatch> staged_{};
  size_t staged_head_ = 0;  // the next staged datagram to split
  size_t staged_count_ = 0;
  // Staged packets handed out and not yet returned; the socket is not read
  // (into the staging buffers) until they are.
  size_t staged_out_ = 0;
  size_t stage_dirty_ = 0;
  // messages the last recvmmsg filled (their lengths to reset)
  // Empty polls in a row; from kIdlePolls on, rx_burst polls with
  // recvfrom. A stream's gaps are shorter; a request/response wait longer.
  static constexpr uint32_t kIdlePolls = 4;
  uint32_t rx_empty_polls_ = kIdlePolls;
};

}  // namespace rpc::detail
