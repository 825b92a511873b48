// The `udp` transport: sendmmsg/recvmmsg over one nonblocking kernel socket.
#include "transport/udp/udp_transport.h"

#include <arpa/inet.h>
#include <linux/sock_diag.h>
#include <netinet/udp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/log.h"
#include "librpc/msg_buffer.h"

namespace rpc::detail {

namespace {

constexpr size_t kIpv4UdpHeaderBytes = 20 + 8;
// The smallest datagram worth running the protocol over: a header plus a
// little data. Anything lower is a misconfiguration, not a tiny link.
constexpr size_t kMinMtuBytes = kIpv4UdpHeaderBytes + kPktHeaderBytes + 64;
constexpr size_t kMaxMtuBytes = 65535;
// 65535 minus the IPv4 and UDP headers: the largest UDP payload over IPv4.
constexpr size_t kMaxUdpPayloadBytes = 65507;

// A send refused for now: the socket buffer is full (EAGAIN, ENOBUFS) or a
// signal interrupted it (EINTR). Retried, up to UdpTransport::kMaxTxRetries
// times; any other error is the datagram's own, and drops it.
bool send_refused_for_now(int err) { return err == EAGAIN || err == ENOBUFS || err == EINTR; }

static_assert(CMSG_SPACE(sizeof(int)) <= 24 && CMSG_SPACE(sizeof(uint16_t)) <= 24,
              "UdpTransport::kCmsgBytes holds one UDP_SEGMENT or UDP_GRO control message");

bool same_destination(const sockaddr_in& a, const sockaddr_in& b) {
  return a.sin_addr.s_addr == b.sin_addr.s_addr && a.sin_port == b.sin_port;
}

// Closes fd and throws; constructors that throw do not run the destructor.
[[noreturn]] void close_and_throw(int fd, const std::string& what, int errno_value) {
  if (fd >= 0) ::close(fd);
  throw Error("udp transport: " + what, errno_value);
}

sockaddr_in to_sockaddr(const UdpRoutingInfo& info) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = info.ipv4_be;
  addr.sin_port = info.port_be;
  return addr;
}

// The destination of a resolved route (see kUdpResolvedDstOffset).
sockaddr_in dst_of(const RoutingInfo& resolved) {
  sockaddr_in addr;
  std::memcpy(&addr, resolved.bytes.data() + kUdpResolvedDstOffset, sizeof(addr));
  return addr;
}

UdpRoutingInfo udp_info_of(const RoutingInfo& info) {
  UdpRoutingInfo udp;
  std::memcpy(&udp, info.bytes.data(), sizeof(udp));
  return udp;
}

// Address and port as they come (network byte order): the key is only
// compared, so byte-swapping it on every received packet would buy nothing.
uint64_t make_src_key(uint32_t ipv4_be, uint16_t port_be) {
  return (static_cast<uint64_t>(ipv4_be) << 16) | port_be;
}

// Raises a socket buffer limit. The *FORCE variant ignores the sysctl cap
// (rmem_max/wmem_max) but needs CAP_NET_ADMIN; without it we get what the
// cap allows, which still works, only with more drops under bursts.
void set_buffer_bytes(int fd, int force_opt, int opt, size_t bytes) {
  // The kernel doubles the value for bookkeeping, so stay below INT_MAX / 2.
  int value = static_cast<int>(std::min<size_t>(bytes, INT_MAX / 2));
  if (::setsockopt(fd, SOL_SOCKET, force_opt, &value, sizeof(value)) == 0) return;
  (void)::setsockopt(fd, SOL_SOCKET, opt, &value, sizeof(value));
}

}  // namespace

UdpTransport::UdpTransport(const RpcConfig& config, const std::string& bind_ip) {
  const size_t mtu_bytes = config.mtu_bytes == 0 ? kDefaultMtuBytes : config.mtu_bytes;
  if (mtu_bytes < kMinMtuBytes || mtu_bytes > kMaxMtuBytes) {
    throw Error("udp transport: mtu_bytes " + std::to_string(mtu_bytes) + " outside [" +
                    std::to_string(kMinMtuBytes) + ", " + std::to_string(kMaxMtuBytes) + "]",
                EINVAL);
  }
  if (config.rx_ring_size == 0) throw Error("udp transport: rx_ring_size is 0", EINVAL);

  caps_.max_pkt_bytes = std::min(mtu_bytes - kIpv4UdpHeaderBytes, kMaxUdpPayloadBytes);
  caps_.max_data_per_pkt = caps_.max_pkt_bytes - kPktHeaderBytes;
  caps_.rx_ring_size = config.rx_ring_size;
  caps_.max_inline_bytes = 0;
  caps_.bulk = false;

  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = 0;  // ephemeral: many Rpcs share one bind_ip
  if (::inet_pton(AF_INET, bind_ip.c_str(), &addr.sin_addr) != 1) {
    throw Error("udp transport: invalid IPv4 address '" + bind_ip + "'", EINVAL);
  }

  fd_ = ::socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd_ < 0) throw Error("udp transport: socket()", errno);
  if (::bind(fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    close_and_throw(fd_, "bind to " + bind_ip, errno);
  }
  socklen_t addr_len = sizeof(local_addr_);
  if (::getsockname(fd_, reinterpret_cast<sockaddr*>(&local_addr_), &addr_len) != 0) {
    close_and_throw(fd_, "getsockname", errno);
  }

  // Size the kernel buffers like the RX ring so a full ring's worth of
  // datagrams can wait in the kernel while the engine is busy.
  const size_t ring_bytes = caps_.rx_ring_size * caps_.max_pkt_bytes;
  set_buffer_bytes(fd_, SO_RCVBUFFORCE, SO_RCVBUF, ring_bytes);
  set_buffer_bytes(fd_, SO_SNDBUFFORCE, SO_SNDBUF, ring_bytes);

  try {
    ring_mem_.resize(ring_bytes);
    ring_src_.resize(caps_.rx_ring_size);
    ring_msgs_.resize(caps_.rx_ring_size);
    ring_iovs_.resize(caps_.rx_ring_size);
  } catch (const std::bad_alloc&) {
    close_and_throw(fd_, "RX ring of " + std::to_string(ring_bytes) + " bytes", ENOMEM);
  }
  for (size_t slot = 0; slot < caps_.rx_ring_size; slot++) {
    ring_iovs_[slot] = {&ring_mem_[slot * caps_.max_pkt_bytes], caps_.max_pkt_bytes};
    msghdr& h = ring_msgs_[slot].msg_hdr;
    h = {};
    h.msg_name = &ring_src_[slot];
    h.msg_iov = &ring_iovs_[slot];
    h.msg_iovlen = 1;
    h.msg_namelen = sizeof(sockaddr_in);
  }
  for (size_t i = 0; i < kMaxBatch; i++) {
    msghdr& h = tx_msgs_[i].msg_hdr;
    h.msg_name = &tx_dsts_[i];
    h.msg_namelen = sizeof(sockaddr_in);
    h.msg_iov = tx_iovs_[i].data();
    tx_iovs_[i][0].iov_len = kPktHeaderBytes;
  }
  if (config.udp_offload) enable_offloads();
}

// Each offload is on if the kernel accepts its socket option (UDP_SEGMENT
// from Linux 4.18, UDP_GRO from 5.0). A ring smaller than a merged
// datagram's packets keeps GRO off (tiny rings are tests' and stay on the
// plain path).
void UdpTransport::enable_offloads() {
  const int no_default_segment = 0;  // only sends that ask are segmented
  gso_ = ::setsockopt(fd_, SOL_UDP, UDP_SEGMENT, &no_default_segment, sizeof(int)) == 0;
  if (gso_) {
    try {
      gso_gather_.resize(kGsoGatherBytes);
    } catch (const std::bad_alloc&) {
      gso_ = false;  // sends stay plain: every datagram on its own
    }
  }
  if (caps_.rx_ring_size >= kMaxSegments) {
    const int on = 1;
    gro_ = ::setsockopt(fd_, SOL_UDP, UDP_GRO, &on, sizeof(on)) == 0;
  }
  if (gro_) {
    try {
      stage_mem_.resize(kGroBatch * kGroBufBytes);
    } catch (const std::bad_alloc&) {
      const int off = 0;
      (void)::setsockopt(fd_, SOL_UDP, UDP_GRO, &off, sizeof(off));
      gro_ = false;
    }
  }
  if (gro_) {
    for (size_t i = 0; i < kGroBatch; i++) {
      stage_iovs_[i] = {&stage_mem_[i * kGroBufBytes], kGroBufBytes};
      msghdr& h = stage_msgs_[i].msg_hdr;
      h.msg_name = &stage_src_[i];
      h.msg_iov = &stage_iovs_[i];
      h.msg_iovlen = 1;
      h.msg_control = stage_cmsgs_[i].bytes;
      h.msg_namelen = sizeof(sockaddr_in);
      h.msg_controllen = kCmsgBytes;
    }
    // Message 0: the next ring buffer (set per read), then the rest of
    // staging buffer 0 behind room for one packet.
    first_iovs_[0] = {nullptr, caps_.max_pkt_bytes};
    first_iovs_[1] = {&stage_mem_[caps_.max_pkt_bytes], kGroBufBytes - caps_.max_pkt_bytes};
    stage_msgs_[0].msg_hdr.msg_iov = first_iovs_.data();
    stage_msgs_[0].msg_hdr.msg_iovlen = first_iovs_.size();
  }
  RPC_LOG_DEBUG("udp transport: GSO {}, GRO {}", gso_ ? "on" : "off", gro_ ? "on" : "off");
}

UdpTransport::~UdpTransport() {
  if (fd_ >= 0) ::close(fd_);
}

void UdpTransport::tx_burst(std::span<const TxItem> items) {
  // One datagram whose data follows its header in memory (packet 0 of a
  // MsgBuffer, or a header-only packet): sendto skips the kernel's msghdr
  // and iovec imports, which matters on the latency path.
  if (items.size() == 1 &&
      (items[0].data_len == 0 || items[0].hdr + kPktHeaderBytes == items[0].data)) [[likely]] {
    const TxItem& item = items[0];
    const sockaddr_in dst = dst_of(*item.route);
    const ssize_t r = ::sendto(fd_, item.hdr, kPktHeaderBytes + item.data_len, 0,
                               reinterpret_cast<const sockaddr*>(&dst), sizeof(dst));
    if (r < 0) [[unlikely]]
      retry_send_one(item);
    return;
  }
  tx_burst_many(items);
}

// The first sendto of tx_burst failed: again while the socket buffer is
// full (or a signal interrupted it), up to kMaxTxRetries more times.
void UdpTransport::retry_send_one(const TxItem& item) {
  const sockaddr_in dst = dst_of(*item.route);
  for (int retries = 1; retries <= kMaxTxRetries; retries++) {
    if (!send_refused_for_now(errno)) return;
    const ssize_t r = ::sendto(fd_, item.hdr, kPktHeaderBytes + item.data_len, 0,
                               reinterpret_cast<const sockaddr*>(&dst), sizeof(dst));
    if (r >= 0) return;
  }
}

void UdpTransport::tx_burst_many(std::span<const TxItem> items) {
  if (gso_) {
    const size_t done = send_offloaded(items);
    if (done == items.size()) return;
    items = items.subspan(done);  // GSO failed: the rest goes plain
  }
  send_plain(items);
}

// One datagram per item, sendmmsg'd in batches. Returns the items handled
// (sent, or dropped on a full socket buffer or a per-datagram error).
size_t UdpTransport::send_plain(std::span<const TxItem> items) {
  mmsghdr* msgs = tx_msgs_.data();
  int retries = 0;

  for (size_t base = 0; base < items.size(); base += kMaxBatch) {
    const size_t n = std::min(items.size() - base, kMaxBatch);
    for (size_t i = 0; i < n; i++) {
      const TxItem& item = items[base + i];
      tx_dsts_[i] = dst_of(*item.route);
      // iovec is shared with readv, hence non-const; sendmmsg only reads.
      tx_iovs_[i][0].iov_base = const_cast<uint8_t*>(item.hdr);
      tx_iovs_[i][1] = {const_cast<uint8_t*>(item.data), item.data_len};
      msgs[i].msg_hdr.msg_iov = tx_iovs_[i].data();  // send_offloaded points it elsewhere
      msgs[i].msg_hdr.msg_iovlen = item.data_len == 0 ? 1 : 2;
      msgs[i].msg_hdr.msg_control = nullptr;
      msgs[i].msg_hdr.msg_controllen = 0;
    }

    size_t sent = 0;
    while (sent < n) {
      const int r = ::sendmmsg(fd_, &msgs[sent], static_cast<unsigned>(n - sent), 0);
      if (r > 0) {
        sent += static_cast<size_t>(r);
      } else if (r < 0 && send_refused_for_now(errno)) {
        // Socket buffer full: spin a little, then drop what is left of the
        // whole burst (not only this chunk) since the buffer will not drain
        // faster than we can retry.
        if (++retries > kMaxTxRetries) return items.size();
      } else {
        // An error specific to this datagram (e.g. unreachable destination):
        // drop it alone so the others still go out.
        sent++;
      }
    }
  }
  return items.size();
}

// Runs of packets to one destination, all of one size but the last (which
// may be shorter), go as one message with UDP_SEGMENT: the kernel cuts it
// back into those packets. Each message is first gathered into one
// contiguous slice of gso_gather_ (header, data, header, data, ...) and sent
// as a single iovec: the kernel's user copy pays per iovec, and a header
// and a data iovec per packet cost up to half its speed (in this project's
// VM, 44-packet messages over loopback: 26 Gbit/s against 56 for one
// iovec, 44 gathered first; in the VM's faster states the gap is small
// and gathering about breaks even; bench/baselines/udp_send_probe,
// docs/transports.md). Returns the items handled; fewer than all when a
// segmented send failed, which turns GSO off (the caller sends the rest
// plain).
size_t UdpTransport::send_offloaded(std::span<const TxItem> items) {
  mmsghdr* msgs = tx_msgs_.data();
  int retries = 0;
  size_t next = 0;  // the first item not yet in a message
  while (next < items.size()) {
    // Build up to kMaxBatch messages, as many as gso_gather_ holds.
    size_t num_msgs = 0;
    size_t gathered = 0;
    while (next < items.size() && num_msgs < kMaxBatch &&
           gathered + kPktHeaderBytes + items[next].data_len <= gso_gather_.size()) {
      const size_t first = next;
      const sockaddr_in dst = dst_of(*items[first].route);
      const size_t seg = kPktHeaderBytes + items[first].data_len;
      const size_t msg_start = gathered;  // the message is gso_gather_[msg_start, gathered)
      size_t last_size = seg;
      while (next < items.size() && next - first < kMaxSegments) {
        const TxItem& item = items[next];
        const size_t size = kPktHeaderBytes + item.data_len;
        if (gathered + size > gso_gather_.size()) break;
        if (next > first) {
          // Only the last packet may be shorter than the first; it ends the run.
          if (last_size != seg || size > seg || gathered - msg_start + size > kMaxOffloadBytes) {
            break;
          }
          if (item.route != items[first].route && !same_destination(dst_of(*item.route), dst)) {
            break;
          }
        }
        std::memcpy(&gso_gather_[gathered], item.hdr, kPktHeaderBytes);
        if (item.data_len > 0) {
          std::memcpy(&gso_gather_[gathered + kPktHeaderBytes], item.data, item.data_len);
        }
        gathered += size;
        last_size = size;
        next++;
      }
      msghdr& h = msgs[num_msgs].msg_hdr;
      tx_dsts_[num_msgs] = dst;
      gso_iovs_[num_msgs] = {&gso_gather_[msg_start], gathered - msg_start};
      h.msg_iov = &gso_iovs_[num_msgs];
      h.msg_iovlen = 1;
      if (next - first > 1) {
        h.msg_control = gso_cmsgs_[num_msgs].bytes;
        h.msg_controllen = CMSG_SPACE(sizeof(uint16_t));
        cmsghdr* cm = CMSG_FIRSTHDR(&h);
        cm->cmsg_level = SOL_UDP;
        cm->cmsg_type = UDP_SEGMENT;
        cm->cmsg_len = CMSG_LEN(sizeof(uint16_t));
        const auto seg16 = static_cast<uint16_t>(seg);
        std::memcpy(CMSG_DATA(cm), &seg16, sizeof(seg16));
      } else {
        h.msg_control = nullptr;
        h.msg_controllen = 0;
      }
      gso_first_item_[num_msgs] = first;
      num_msgs++;
    }

    size_t sent = 0;
    while (sent < num_msgs) {
      const bool segmented = msgs[sent].msg_hdr.msg_control != nullptr;
      int r;
      if (segmented && fail_next_gso_) {
        fail_next_gso_ = false;
        errno = EIO;  // what a device without UDP segmentation gives
        r = -1;
      } else {
        r = ::sendmmsg(fd_, &msgs[sent], static_cast<unsigned>(num_msgs - sent), 0);
      }
      if (r > 0) {
        for (size_t i = sent; i < sent + static_cast<size_t>(r); i++) {
          if (msgs[i].msg_hdr.msg_control != nullptr) gso_sends_++;
        }
        sent += static_cast<size_t>(r);
      } else if (r < 0 && send_refused_for_now(errno)) {
        if (++retries > kMaxTxRetries) return items.size();  // dropped, as send_plain does
      } else if (segmented) {
        RPC_LOG_INFO("udp transport: a segmented (GSO) send failed ({}); GSO off",
                     std::strerror(errno));
        gso_ = false;
        return gso_first_item_[sent];
      } else {
        sent++;  // an error specific to this datagram: drop it alone
      }
    }
  }
  return items.size();
}

size_t UdpTransport::rx_burst(std::span<RxPacket> out) {
  return gro_ ? rx_burst_gro(out) : rx_burst_plain(out);
}

size_t UdpTransport::rx_burst_plain(std::span<RxPacket> out) {
  const size_t ring_size = caps_.rx_ring_size;
  // Buffers are handed out in ring order, so one recvmmsg fills only the
  // contiguous free slots up to the wrap; the next call continues at 0.
  const size_t n =
      std::min({out.size(), kMaxBatch, ring_size - ring_in_use_, ring_size - ring_head_});
  if (n == 0) return 0;

  const size_t pkt_bytes = caps_.max_pkt_bytes;
  if (rx_empty_polls_ >= kIdlePolls) {
    // Idle for a while (a request/response wait, not a gap inside a
    // stream): wait for the next datagram with recvfrom, whose empty call
    // is cheaper than recvmmsg's (no msghdr and iovec array to import).
    // Batches resume with the next poll.
    uint8_t* buf = &ring_mem_[ring_head_ * pkt_bytes];
    sockaddr_in& src = ring_src_[ring_head_];
    socklen_t src_len = sizeof(src);
    // MSG_TRUNC: the datagram's real length, to spot one longer than ours.
    const ssize_t len = ::recvfrom(fd_, buf, pkt_bytes, MSG_DONTWAIT | MSG_TRUNC,
                                   reinterpret_cast<sockaddr*>(&src), &src_len);
    if (len < 0) return 0;  // EAGAIN: still idle; other errors: treat as loss
    rx_empty_polls_ = 0;
    if (static_cast<size_t>(len) > pkt_bytes) {  // truncated: dropped (see below)
      rx_drops.oversized++;
      return 0;
    }
    out[0] = {buf, static_cast<uint32_t>(len), make_src_key(src.sin_addr.s_addr, src.sin_port)};
    ring_head_ = (ring_head_ + 1) % ring_size;
    ring_in_use_++;
    return 1;
  }
  // msg_namelen stays sizeof(sockaddr_in): the kernel writes back the
  // length of an IPv4 source address, which is the same value.
  mmsghdr* msgs = &ring_msgs_[ring_head_];

  const int r = ::recvmmsg(fd_, msgs, static_cast<unsigned>(n), MSG_DONTWAIT, nullptr);
  if (r <= 0) {
    rx_empty_polls_++;
    return 0;  // EAGAIN: nothing pending; other errors: treat as loss
  }
  rx_empty_polls_ = 0;

  // A datagram longer than our MTU arrives truncated; its header would lie
  // about its length, so drop it and close the gap by moving later packets
  // down. Rare (a misconfigured peer), so the copy does not matter.
  size_t kept = 0;
  for (size_t i = 0; i < static_cast<size_t>(r); i++) {
    msgs[i].msg_hdr.msg_namelen = sizeof(sockaddr_in);
    if (msgs[i].msg_hdr.msg_flags & MSG_TRUNC) {
      rx_drops.oversized++;
      continue;
    }
    uint8_t* buf = &ring_mem_[(ring_head_ + kept) * pkt_bytes];
    const sockaddr_in& src_i = ring_src_[ring_head_ + i];
    if (kept != i) {
      std::memmove(buf, msgs[i].msg_hdr.msg_iov->iov_base, msgs[i].msg_len);
      ring_src_[ring_head_ + kept] = src_i;
    }
    const sockaddr_in& src = ring_src_[ring_head_ + kept];
    out[kept] = {buf, msgs[i].msg_len, make_src_key(src.sin_addr.s_addr, src.sin_port)};
    kept++;
  }

  ring_head_ = (ring_head_ + kept) % ring_size;
  ring_in_use_ += kept;
  return kept;
}

// With GRO: the first datagram of each read goes straight into the next
// ring buffer (a single packet, the common case for small RPCs, costs no
// copy); the others, and merged ones, stay in their staging buffers and are
// handed out there packet by packet, in order, as the engine takes them
// (no copy either: an 8 MiB stream spent about a tenth of the receiver's
// time copying them into ring buffers). The socket is read only when
// nothing staged is left, and none of the staged packets is still held
// (the next read overwrites them): the engine returns every packet of a
// burst before its next rx_burst.
size_t UdpTransport::rx_burst_gro(std::span<RxPacket> out) {
  if (out.empty()) return 0;
  if (staged_count_ == 0) {
    if (staged_out_ > 0 || ring_in_use_ == caps_.rx_ring_size) return 0;
    // The common case: read the socket; a single datagram lands in place.
    const int r = receive_gro(out[0]);
    if (r < 0) return 0;
    if (r == 0 && staged_count_ == 0) return 1;
    if (r == 0) return 1 + take_staged(out.subspan(1));
  }
  return take_staged(out);
}

// Hands out staged packets where they are, one RxPacket each, in order.
size_t UdpTransport::take_staged(std::span<RxPacket> out) {
  size_t k = 0;
  while (k < out.size() && staged_count_ > 0) {
    Staged& st = staged_[staged_head_];
    const uint32_t len = std::min(st.seg, st.len - st.consumed);
    out[k++] = {&stage_mem_[st.buf_index * kGroBufBytes + st.consumed], len, st.src_key};
    st.consumed += len;
    if (st.consumed == st.len) {
      staged_head_++;
      staged_count_--;
    }
  }
  staged_out_ += k;
  return k;
}

// The packet size a received message says it was merged from (UDP_GRO),
// or its whole length when it was not merged.
uint32_t UdpTransport::segment_size_of(msghdr& h, uint32_t len) {
  if (h.msg_controllen == 0) return len;  // the kernel adds UDP_GRO only to merged ones
  for (cmsghdr* cm = CMSG_FIRSTHDR(&h); cm != nullptr; cm = CMSG_NXTHDR(&h, cm)) {
    if (cm->cmsg_level == SOL_UDP && cm->cmsg_type == UDP_GRO) {
      int gso_size = 0;
      std::memcpy(&gso_size, CMSG_DATA(cm), sizeof(gso_size));
      if (gso_size > 0 && static_cast<uint32_t>(gso_size) < len) {
        gro_merged_++;
        return static_cast<uint32_t>(gso_size);
      }
    }
  }
  return len;
}

// Adds one received datagram to the staged ones. False when it is all
// dropped: a peer's packets longer than ours are, as they would be unmerged;
// a shorter last packet merged behind them is kept.
bool UdpTransport::stage(uint32_t buf_index, uint32_t len, uint32_t seg, uint64_t src_key) {
  uint32_t skip = 0;
  if (seg > caps_.max_pkt_bytes) {
    const uint32_t tail = len % seg;
    rx_drops.oversized += len / seg;
    if (tail == 0 || tail > caps_.max_pkt_bytes) {
      if (tail != 0) rx_drops.oversized++;
      return false;
    }
    skip = len - tail;
  }
  staged_[staged_head_ + staged_count_] = Staged{len, seg, skip, src_key, buf_index};
  staged_count_++;
  return true;
}

// Reads datagrams: one after an empty poll (a request/response wait, and a
// cheaper call), else up to kGroBatch (a stream). Message 0's first
// max_pkt_bytes land in the next ring buffer and the rest behind room for
// them in staging buffer 0; the others land in their staging buffers.
// Returns -1 when nothing usable arrived, 0 when `first` holds message 0
// as one packet in place (more may be staged), 1 when all is staged.
int UdpTransport::receive_gro(RxPacket& first) {
  const size_t pkt_bytes = caps_.max_pkt_bytes;
  uint8_t* slot = &ring_mem_[ring_head_ * pkt_bytes];
  first_iovs_[0].iov_base = slot;
  // The kernel rewrote the name and control lengths of the messages it
  // filled last time; the others are as set up.
  stage_msgs_[0].msg_hdr.msg_namelen = sizeof(sockaddr_in);  // always read: reset unconditionally
  stage_msgs_[0].msg_hdr.msg_controllen = kCmsgBytes;
  for (size_t i = 1; i < stage_dirty_; i++) {
    stage_msgs_[i].msg_hdr.msg_namelen = sizeof(sockaddr_in);
    stage_msgs_[i].msg_hdr.msg_controllen = kCmsgBytes;
  }
  stage_dirty_ = 0;
  int r;
  if (rx_empty_polls_ > 0) {
    const ssize_t len = ::recvmsg(fd_, &stage_msgs_[0].msg_hdr, MSG_DONTWAIT);
    r = len < 0 ? -1 : 1;
    if (len >= 0) stage_msgs_[0].msg_len = static_cast<unsigned>(len);
  } else {
    r = ::recvmmsg(fd_, stage_msgs_.data(), kGroBatch, MSG_DONTWAIT, nullptr);
  }
  if (r <= 0) {
    if (rx_empty_polls_ < kIdlePolls) rx_empty_polls_++;
    return -1;  // EAGAIN: nothing pending; other errors: treat as loss
  }
  rx_empty_polls_ = 0;
  stage_dirty_ = static_cast<size_t>(r);
  staged_head_ = 0;
  staged_count_ = 0;
  // The common case of a request/response exchange: one datagram, neither
  // merged (no UDP_GRO control message) nor truncated, already in place.
  if (r == 1 && stage_msgs_[0].msg_hdr.msg_controllen == 0 &&
      (stage_msgs_[0].msg_hdr.msg_flags & MSG_TRUNC) == 0 && stage_msgs_[0].msg_len <= pkt_bytes) {
    const sockaddr_in& src = stage_src_[0];
    first = {slot, stage_msgs_[0].msg_len, make_src_key(src.sin_addr.s_addr, src.sin_port)};
    hand_out_ring_buffer();
    return 0;
  }
  return stage_received(first, r);
}

// The rest of receive_gro: several datagrams, or merged or truncated ones.
// Out of line, so that the common case above saves fewer registers.
int UdpTransport::stage_received(RxPacket& first, int r) {
  const size_t pkt_bytes = caps_.max_pkt_bytes;
  uint8_t* slot = &ring_mem_[ring_head_ * pkt_bytes];
  int result = 1;
  for (size_t i = 0; i < static_cast<size_t>(r); i++) {
    msghdr& h = stage_msgs_[i].msg_hdr;
    const uint32_t len = stage_msgs_[i].msg_len;
    if ((h.msg_flags & MSG_TRUNC) != 0) {
      rx_drops.oversized++;
      continue;
    }
    const sockaddr_in& src = stage_src_[i];
    const uint64_t key = make_src_key(src.sin_addr.s_addr, src.sin_port);
    const uint32_t seg = segment_size_of(h, len);
    if (i == 0) {
      if (seg == len && len <= pkt_bytes) {  // one packet, already where it belongs
        first = {slot, len, key};
        hand_out_ring_buffer();
        result = 0;
        continue;
      }
      std::memcpy(stage_mem_.data(), slot, pkt_bytes);  // now contiguous in staging buffer 0
    }
    (void)stage(static_cast<uint32_t>(i), len, seg, key);
  }
  if (result == 1 && staged_count_ == 0) return -1;
  return result;
}

void UdpTransport::post_recvs(size_t n) {
  // Returning buffers never handed out would let the ring overwrite
  // packets the engine still reads.
  RPC_ASSERT(n <= ring_in_use_ + staged_out_,
             "udp transport: post_recvs returns more buffers than are in use");
  // Ring buffers are always the older: none is handed out while a staged
  // packet is held (rx_burst_gro).
  const size_t from_ring = std::min(n, ring_in_use_);
  ring_in_use_ -= from_ring;
  staged_out_ -= n - from_ring;
}

void UdpTransport::fill_local_routing_info(RoutingInfo& out) const {
  out.bytes.fill(0);
  const UdpRoutingInfo info{local_addr_.sin_addr.s_addr, local_addr_.sin_port, kUdpRoutingMagic};
  std::memcpy(out.bytes.data(), &info, sizeof(info));
}

bool UdpTransport::resolve_remote_routing_info(RoutingInfo& info) {
  const UdpRoutingInfo udp = udp_info_of(info);
  if (udp.magic != kUdpRoutingMagic || udp.port_be == 0) return false;
  const sockaddr_in dst = to_sockaddr(udp);
  info.bytes.fill(0);
  std::memcpy(info.bytes.data() + kUdpResolvedDstOffset, &dst, sizeof(dst));
  return true;
}

uint64_t UdpTransport::src_key_of(const RoutingInfo& resolved) const {
  const sockaddr_in dst = dst_of(resolved);
  return make_src_key(dst.sin_addr.s_addr, dst.sin_port);
}

Result<MemReg> UdpTransport::register_memory(void*, size_t) {
  // The kernel copies from user memory on send: nothing to pin or key.
  return MemReg{};
}

void UdpTransport::deregister_memory(const MemReg&) {}

uint16_t UdpTransport::local_port() const { return ntohs(local_addr_.sin_port); }

// The kernel counts datagrams it dropped because this socket's receive
// buffer was full: the udp transport's ring overflowing (SO_MEMINFO,
// Linux 4.6+). One system call, on the control path only.
void UdpTransport::refresh_rx_drops() {
  std::array<uint32_t, SK_MEMINFO_VARS> meminfo{};
  socklen_t len = sizeof(meminfo);
  if (::getsockopt(fd_, SOL_SOCKET, SO_MEMINFO, meminfo.data(), &len) == 0 &&
      len >= (SK_MEMINFO_DROPS + 1) * sizeof(uint32_t)) {
    // The kernel's count is 32 bits: add what it grew by, so that ours
    // keeps counting when it wraps.
    const uint32_t now = meminfo[SK_MEMINFO_DROPS];
    rx_drops.ring_full += static_cast<uint32_t>(now - kernel_drops_seen_);
    kernel_drops_seen_ = now;
  }
}

}  // namespace rpc::detail
