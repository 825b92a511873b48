// Raw one-way UDP stream: the "limit of the path" baseline that librpc's
// large-message goodput is compared to (librpc sends an 8 MiB message as
// 1472-byte datagrams, the udp transport's datagram for a 1500 MTU).
// libc, the C++ standard library, fmt and the baseline scaffold
// (scaffold.h, tools/measure) only. Results: bench/compare/SCHEMA.md,
// workload "goodput", --json / --csv.
//
//   udp_stream server [--bind IP:PORT] [--batch N] [--credit-every N]   (receiver)
//   udp_stream client --server IP:PORT [LOAD OPTIONS]                    (sender)
//   udp_stream [LOAD OPTIONS] [--credit-every N]   (both in one process, over 127.0.0.1)
//   each also takes --offload on|off (default off): UDP GSO sends, UDP GRO receives,
//   and --message-bytes N (default 0): data from and into N-byte buffers
//
// The sender busy-polls and sends --datagram-size datagrams in sendmmsg
// batches of up to --batch; the receiver busy-polls recvmmsg batches and
// counts datagrams and payload bytes (the whole UDP payload).
//
// Offload (--offload on; default off, the plain path above). librpc's udp
// transport sends runs of equal-size datagrams with UDP GSO and receives with
// UDP GRO, so the limit it is compared to may use them too. With it on, the
// sender packs each sendmmsg batch of --batch datagrams into messages of up
// to kMaxGsoSegments datagrams and kMaxUdpPayload bytes, each with a
// UDP_SEGMENT control message of --datagram-size: the kernel cuts them back
// into datagrams (on loopback it hands them whole to a GRO receiver). The
// receiver turns UDP_GRO on and takes up to --batch messages per recvmmsg
// into 64 KiB buffers; a merged one names its segment size in a UDP_GRO
// control message and counts as ceil(length / segment size) datagrams, of
// `length` bytes. Each end's setting is its own (a GRO receiver counts a
// plain sender right, and the kernel splits GSO sends for a plain receiver).
// A kernel that refuses UDP_SEGMENT or UDP_GRO fails the run rather than
// measuring the plain path under the offload's name. Window and credits stay
// in datagrams and bytes.
//
// Message memory (--message-bytes N, default 0 = off). By default the sender
// sends every datagram from one small buffer and the receiver lands them in
// a batch's worth of buffers, so all the data stays in the CPU's caches. An
// RPC engine moving 8 MiB messages reads each from, and writes it into,
// 8 MiB of memory. With N > 0 the sender walks an N-byte buffer (every
// datagram still opens with run_id) and the receiver lands each batch at
// the next offset of its own N-byte buffer, wrapping: the same memory
// traffic as an N-byte message each way, and no copy beyond the kernel's.
//
// Flow control. Unthrottled, the sender would mostly measure how fast the
// kernel drops datagrams at a full receive queue, so the stream runs under a
// sliding window, as librpc's own transfers do: the receiver returns a tiny
// credit datagram (its cumulative datagram and byte counts) every
// --credit-every datagrams, and also whenever it has drained its queue with
// datagrams still uncredited; the sender keeps at most --window-datagrams
// sent but not yet credited. Credits are cumulative, so a lost credit is
// repaired by the next. If a data datagram is lost the window would shrink for
// good: after kStallTimeout without credit progress the sender writes off what
// is in flight (a "stall"; the write-off is taken back if late credits show the
// datagrams arrived after all) and carries on. No credit at all for
// kDeadReceiverTimeout fails the run.
//
// The sender reports: goodput is the receiver's byte count, as carried by the
// credits, between the start and the end of the measured interval (both ends
// lag by at most one credit, negligible over seconds).
//
// Wire format, host byte order (run both ends on like machines):
//   data:   [run_id u64][filler]   run_id is random per sender run; a new one
//                                  resets the receiver's counters; with offload
//                                  every segment starts with it
//   credit: [run_id u64][datagrams u64][bytes u64]
//   a 0-length datagram stops the receiver in combined mode; a standalone
//   receiver runs until killed.

#include <fmt/core.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "cli.h"
#include "scaffold.h"
#include "udp_socket.h"

namespace {

using baseline::Clock;
using baseline::format_addr;
using baseline::is_transient;
using baseline::RunError;
using baseline::throw_errno;
using baseline::UdpSocket;

constexpr std::size_t kMaxUdpPayload = 65507;  // IPv4 UDP maximum
// UDP GSO/GRO bounds: segments in one send (the kernel's UDP_MAX_SEGMENTS; its
// bytes are bounded by kMaxUdpPayload, one IP datagram) and the buffer one
// merged receive fits in (GRO stops merging before 64 KiB).
constexpr std::size_t kMaxGsoSegments = 64;
constexpr std::size_t kGroBufferBytes = 64 << 10;
static_assert(kGroBufferBytes >= kMaxUdpPayload);
// One UDP_SEGMENT (u16) or UDP_GRO (int) control message.
constexpr std::size_t kCmsgBytes = CMSG_SPACE(sizeof(int));
static_assert(CMSG_SPACE(sizeof(std::uint16_t)) <= kCmsgBytes);
constexpr std::size_t kRunIdBytes = sizeof(std::uint64_t);
constexpr std::size_t kMaxWindow = 1 << 20;
constexpr std::size_t kCreditBatch = 16;  // credits drained per recvmmsg
constexpr int kSocketBufferBytes = 32 << 20;
constexpr auto kStallTimeout = std::chrono::milliseconds(5);
constexpr auto kDeadReceiverTimeout = std::chrono::seconds(1);

struct Credit {
  std::uint64_t run_id;
  std::uint64_t datagrams;  // cumulative, this run
  std::uint64_t bytes;      // cumulative payload bytes, this run
};
static_assert(sizeof(Credit) == 24);

struct Options {
  std::size_t datagram_size = 1472;  // 1500 MTU - IPv4 and UDP headers
  std::size_t window = 256;
  std::size_t batch = 32;  // = UdpTransport::kMaxBatch
  std::size_t credit_every = 32;
  bool offload = false;           // UDP GSO (sender) and UDP GRO (receiver)
  std::size_t message_bytes = 0;  // 0: cache-resident buffers; else walk N-byte buffers
  double duration_s = 3.0;
  double warmup_s = 0.5;
};

// The sender's options.
void add_load_options(CLI::App& app, Options& opt) {
  app.add_option("--datagram-size", opt.datagram_size, "datagram payload bytes")
      ->check(CLI::Range(kRunIdBytes, kMaxUdpPayload))
      ->capture_default_str();
  app.add_option("--window-datagrams", opt.window, "datagrams sent but not yet credited")
      ->check(CLI::Range(std::size_t{1}, kMaxWindow))
      ->capture_default_str();
  baseline::add_interval_options(app, opt.duration_s, opt.warmup_s);
}

// The receiver's options.
void add_receiver_options(CLI::App& app, Options& opt) {
  app.add_option("--credit-every", opt.credit_every,
                 "credit after N datagrams, and when the queue is drained")
      ->check(CLI::Range(std::size_t{1}, kMaxWindow))
      ->capture_default_str();
}

// Both ends' options.
void add_shared_options(CLI::App& app, Options& opt) {
  baseline::add_batch_option(app, opt.batch);
  app.add_option("--offload", opt.offload,
                 fmt::format("on: UDP GSO sends (messages of up to {} datagrams and {} bytes "
                             "with UDP_SEGMENT), UDP GRO receives (--batch counts possibly "
                             "merged messages of up to {} bytes); fails if the kernel refuses "
                             "either",
                             kMaxGsoSegments, kMaxUdpPayload, kGroBufferBytes))
      ->check(CLI::IsMember({"on", "off"}))
      ->type_name("on|off")
      ->default_str("off");
  measure::add_size_option(app, "--message-bytes", opt.message_bytes,
                           "send from / receive into N-byte buffers walked in order, as N-byte "
                           "messages would be (0: small buffers that stay in cache)",
                           0, std::size_t{1} << 30)
      ->capture_default_str();
}

// Room for one control message, aligned as the CMSG_* macros need.
union CmsgBuffer {
  cmsghdr align;
  char bytes[kCmsgBytes];
};

// Turns UDP GRO on (Linux 5.0+): merged receives, whose segment size a UDP_GRO
// control message names. Throws RunError if the kernel refuses.
void enable_gro(UdpSocket& sock) { sock.require_udp_option(UDP_GRO, 1, "UDP_GRO", "5.0"); }

// Makes UDP GSO available (Linux 4.18+). The socket's default segment size
// stays 0: only sends with a UDP_SEGMENT control message are segmented.
// Throws RunError if the kernel refuses.
void enable_gso(UdpSocket& sock) { sock.require_udp_option(UDP_SEGMENT, 0, "UDP_SEGMENT", "4.18"); }

// ---------------------------------------------------------------------------
// Receiver

// Busy-polls a bound socket, counts the stream and returns credits to its
// sender. Single-threaded; the socket must outlive it. With `offload`, the
// socket must have UDP GRO on (enable_gro) and each of the `batch` messages
// per recvmmsg may be a merged run of datagrams.
class StreamReceiver {
 public:
  StreamReceiver(UdpSocket& sock, std::size_t batch, std::size_t credit_every, bool offload,
                 std::size_t message_bytes)
      : sock_(sock),
        batch_(batch),
        credit_every_(credit_every),
        offload_(offload),
        buffer_bytes_(offload ? kGroBufferBytes : kMaxUdpPayload),
        data_bytes_(std::max(batch * buffer_bytes_, message_bytes)),
        walk_(message_bytes > 0),
        // Not zero-filled: only the pages datagrams land in get touched.
        data_(std::make_unique_for_overwrite<char[]>(data_bytes_)),
        from_(batch),
        iov_(batch),
        cmsgs_(offload ? batch : 0),
        msgs_(batch) {
    for (std::size_t k = 0; k < batch_; ++k) {
      iov_[k] = {data_.get() + k * buffer_bytes_, buffer_bytes_};
      msgs_[k].msg_hdr.msg_iov = &iov_[k];
      msgs_[k].msg_hdr.msg_iovlen = 1;
      msgs_[k].msg_hdr.msg_name = &from_[k];
      if (offload_) msgs_[k].msg_hdr.msg_control = cmsgs_[k].bytes;
    }
  }

  // Returns when a 0-length datagram arrives (if stop_on_empty) or when
  // `stop` becomes true.
  void run(bool stop_on_empty, const std::atomic<bool>& stop);

 private:
  // Counts one received batch; returns false on a stop datagram.
  bool count_batch(std::size_t got, bool stop_on_empty);
  void send_credit();

  UdpSocket& sock_;
  std::size_t batch_;
  std::size_t credit_every_;
  bool offload_;
  std::size_t buffer_bytes_;  // per message
  std::size_t data_bytes_;    // batch_ buffers, or the --message-bytes buffer
  bool walk_;                 // --message-bytes: each batch lands further on
  std::size_t data_offset_ = 0;
  std::unique_ptr<char[]> data_;
  std::vector<sockaddr_in> from_;
  std::vector<iovec> iov_;
  std::vector<CmsgBuffer> cmsgs_;  // offload only: one per message, for UDP_GRO
  std::vector<mmsghdr> msgs_;
  sockaddr_in sender_{};  // where credits go: the latest data datagram's source
  Credit counts_{0, 0, 0};
  std::uint64_t credited_ = 0;  // counts_.datagrams at the latest credit
};

void StreamReceiver::run(bool stop_on_empty, const std::atomic<bool>& stop) {
  const auto vlen = static_cast<unsigned>(batch_);
  while (!stop.load(std::memory_order_relaxed)) {
    for (auto& m : msgs_) m.msg_hdr.msg_namelen = sizeof(sockaddr_in);
    if (offload_) {
      for (auto& m : msgs_) m.msg_hdr.msg_controllen = kCmsgBytes;
    }
    if (walk_) {
      for (std::size_t k = 0; k < batch_; ++k) {
        iov_[k].iov_base = data_.get() + data_offset_ + k * buffer_bytes_;
      }
    }
    const int got = ::recvmmsg(sock_.fd(), msgs_.data(), vlen, MSG_DONTWAIT, nullptr);
    if (got < 0) {
      // Stray ICMP errors from a vanished sender must not kill the receiver.
      if (!is_transient(errno) && errno != ECONNREFUSED) throw_errno("recvmmsg");
      // Queue drained: credit what is uncredited, so that no window waits for
      // credit_every datagrams that will never come.
      if (counts_.datagrams != credited_) send_credit();
      continue;
    }
    if (!count_batch(static_cast<std::size_t>(got), stop_on_empty)) return;
    if (walk_) {
      // The next batch lands past this one, as a message's packets would.
      data_offset_ += static_cast<std::size_t>(got) * buffer_bytes_;
      if (data_offset_ + batch_ * buffer_bytes_ > data_bytes_) data_offset_ = 0;
    }
    if (counts_.datagrams - credited_ >= credit_every_) send_credit();
  }
}

// How many datagrams a receive holds: a merged (GRO) one names its segment
// size in a UDP_GRO control message; without one it is a single datagram.
std::uint64_t gro_datagrams(mmsghdr& m) {
  std::size_t segment_bytes = m.msg_len;
  for (cmsghdr* cm = CMSG_FIRSTHDR(&m.msg_hdr); cm != nullptr; cm = CMSG_NXTHDR(&m.msg_hdr, cm)) {
    if (cm->cmsg_level == SOL_UDP && cm->cmsg_type == UDP_GRO) {
      int gso_size = 0;
      std::memcpy(&gso_size, CMSG_DATA(cm), sizeof gso_size);
      if (gso_size > 0) segment_bytes = static_cast<std::size_t>(gso_size);
    }
  }
  return (m.msg_len + segment_bytes - 1) / segment_bytes;  // msg_len > 0 here
}

bool StreamReceiver::count_batch(std::size_t got, bool stop_on_empty) {
  for (std::size_t k = 0; k < got; ++k) {
    mmsghdr& m = msgs_[k];
    if (m.msg_len == 0 && stop_on_empty) return false;
    if (m.msg_len < kRunIdBytes || m.msg_hdr.msg_namelen != sizeof(sockaddr_in)) continue;
    std::uint64_t run_id = 0;
    std::memcpy(&run_id, iov_[k].iov_base, kRunIdBytes);
    if (run_id != counts_.run_id) {  // a new sender run: start counting afresh
      counts_ = {run_id, 0, 0};
      credited_ = 0;
    }
    // GRO merges the datagrams of one flow only (one source socket: one
    // sender run), so the first segment's run_id speaks for all.
    counts_.datagrams += offload_ ? gro_datagrams(m) : 1;
    counts_.bytes += m.msg_len;
    sender_ = from_[k];
  }
  return true;
}

void StreamReceiver::send_credit() {
  // A credit that cannot be sent now is repaired by the next (they are cumulative).
  (void)::sendto(sock_.fd(), &counts_, sizeof counts_, MSG_DONTWAIT,
                 reinterpret_cast<const sockaddr*>(&sender_), sizeof sender_);
  credited_ = counts_.datagrams;
}

// ---------------------------------------------------------------------------
// Sender

struct GoodputResults {
  std::uint64_t datagrams = 0;  // received in the measured interval
  std::uint64_t bytes = 0;      // payload bytes received in the measured interval
  double duration_s = 0;        // measured interval, as timed
  std::uint64_t stalls = 0;     // window write-offs in the measured interval
  std::uint64_t lost = 0;       // datagrams presumed lost, whole run
};

// Datagrams in one UDP GSO send: at most kMaxGsoSegments and kMaxUdpPayload bytes.
std::size_t gso_segments_per_send(std::size_t datagram_size) {
  return std::min(kMaxGsoSegments, kMaxUdpPayload / datagram_size);
}

// The sender's buffer: one send's worth, or --message-bytes rounded up to
// whole sends (so that no send wraps around its end).
std::size_t payload_bytes(std::size_t message_bytes, std::size_t send_bytes) {
  const std::size_t sends = std::max<std::size_t>(1, (message_bytes + send_bytes - 1) / send_bytes);
  return sends * send_bytes;
}

// Streams datagrams to a receiver under a credit window. Single-threaded.
// With opt.offload, throws RunError if the kernel refuses UDP GSO.
class StreamSender {
 public:
  StreamSender(const sockaddr_in& receiver, const Options& opt)
      : receiver_(receiver),
        window_(opt.window),
        batch_(opt.batch),
        offload_(opt.offload),
        datagram_size_(opt.datagram_size),
        segments_per_send_(offload_ ? gso_segments_per_send(datagram_size_) : 1),
        payload_(payload_bytes(opt.message_bytes, segments_per_send_ * datagram_size_), 'x'),
        walk_(opt.message_bytes > 0),
        tx_iov_(batch_, iovec{payload_.data(), datagram_size_}),
        tx_cmsgs_(offload_ ? batch_ : 0),
        tx_(batch_),
        credit_iov_(kCreditBatch),
        credit_msgs_(kCreditBatch) {
    if (offload_) enable_gso(sock_);
    std::random_device rd;
    run_id_ = (std::uint64_t{rd()} << 32) ^ rd() ^
              static_cast<std::uint64_t>(Clock::now().time_since_epoch().count());
    // Every datagram carries the same bytes: one buffer serves the whole batch
    // (with offload, a GSO send's worth of datagrams, each opening with
    // run_id); with --message-bytes, a longer one walked in order.
    for (std::size_t off = 0; off < payload_.size(); off += datagram_size_) {
      std::memcpy(payload_.data() + off, &run_id_, kRunIdBytes);
    }
    for (std::size_t k = 0; k < batch_; ++k) {
      msghdr& h = tx_[k].msg_hdr;
      h.msg_iov = &tx_iov_[k];
      h.msg_iovlen = 1;
      // Unconnected, destination per datagram: as librpc's udp transport does.
      h.msg_name = &receiver_;
      h.msg_namelen = sizeof receiver_;
      if (offload_) {
        // The segment size never changes: each message's UDP_SEGMENT is set once.
        h.msg_control = tx_cmsgs_[k].bytes;
        h.msg_controllen = CMSG_SPACE(sizeof(std::uint16_t));
        cmsghdr* cm = CMSG_FIRSTHDR(&h);
        cm->cmsg_level = SOL_UDP;
        cm->cmsg_type = UDP_SEGMENT;
        cm->cmsg_len = CMSG_LEN(sizeof(std::uint16_t));  // the kernel wants exactly a u16
        const auto segment_bytes = static_cast<std::uint16_t>(datagram_size_);
        std::memcpy(CMSG_DATA(cm), &segment_bytes, sizeof segment_bytes);
      }
    }
    for (std::size_t k = 0; k < kCreditBatch; ++k) {
      credit_iov_[k] = {&credits_[k], sizeof(Credit)};
      credit_msgs_[k].msg_hdr.msg_iov = &credit_iov_[k];
      credit_msgs_[k].msg_hdr.msg_iovlen = 1;
    }
  }

  GoodputResults run(double warmup_s, double duration_s);

  // Asks a combined-mode receiver to return.
  void send_stop() {
    (void)::sendto(sock_.fd(), nullptr, 0, 0, reinterpret_cast<const sockaddr*>(&receiver_),
                   sizeof receiver_);
  }

 private:
  std::uint64_t in_flight() const { return sent_ - acked_.datagrams - written_off_; }
  bool poll_credits();
  unsigned pack_gso_sends(std::size_t datagrams);
  void place_sends(unsigned msgs);
  void advance_sends(std::size_t sent_msgs);
  void top_up_window();

  UdpSocket sock_{kSocketBufferBytes};
  sockaddr_in receiver_;
  std::size_t window_;
  std::size_t batch_;
  bool offload_;
  std::size_t datagram_size_;
  std::size_t segments_per_send_;  // datagrams per message: 1 unless offload_
  std::uint64_t run_id_ = 0;
  std::vector<char> payload_;
  bool walk_;  // --message-bytes: sends walk payload_
  std::size_t payload_offset_ = 0;
  std::vector<iovec> tx_iov_;         // one per message: GSO sends differ in length
  std::vector<CmsgBuffer> tx_cmsgs_;  // offload only: UDP_SEGMENT, one per message
  std::vector<mmsghdr> tx_;
  std::array<Credit, kCreditBatch> credits_{};
  std::vector<iovec> credit_iov_;
  std::vector<mmsghdr> credit_msgs_;
  std::uint64_t sent_ = 0;
  Credit acked_{0, 0, 0};          // the latest credit's counts
  std::uint64_t written_off_ = 0;  // presumed lost; sent_ >= acked_ + written_off_
};

// Drains pending credits; returns whether the credited count advanced.
bool StreamSender::poll_credits() {
  const int got = ::recvmmsg(sock_.fd(), credit_msgs_.data(), kCreditBatch, MSG_DONTWAIT, nullptr);
  if (got < 0) {
    if (is_transient(errno) || errno == ECONNREFUSED) return false;
    throw_errno("recvmmsg");
  }
  const std::uint64_t before = acked_.datagrams;
  for (std::size_t k = 0; k < static_cast<std::size_t>(got); ++k) {
    const Credit& c = credits_[k];
    if (credit_msgs_[k].msg_len != sizeof(Credit) || c.run_id != run_id_) continue;
    if (c.datagrams > acked_.datagrams && c.datagrams <= sent_) acked_ = c;
  }
  // Datagrams written off that arrived after all are no longer lost.
  written_off_ = std::min(written_off_, sent_ - acked_.datagrams);
  return acked_.datagrams != before;
}

// Offload: lays `datagrams` out as GSO sends of up to segments_per_send_
// datagrams each; returns how many messages that takes.
unsigned StreamSender::pack_gso_sends(std::size_t datagrams) {
  unsigned msgs = 0;
  for (std::size_t left = datagrams; left > 0; ++msgs) {
    const std::size_t segments = std::min(left, segments_per_send_);
    tx_iov_[msgs].iov_len = segments * datagram_size_;
    left -= segments;
  }
  return msgs;
}

// --message-bytes: the next `msgs` sends take their data from payload_ in
// order from payload_offset_ (wrapping at a whole send, as each fits).
void StreamSender::place_sends(unsigned msgs) {
  std::size_t off = payload_offset_;
  for (unsigned k = 0; k < msgs; ++k) {
    if (off + tx_iov_[k].iov_len > payload_.size()) off = 0;
    tx_iov_[k].iov_base = payload_.data() + off;
    off += tx_iov_[k].iov_len;
  }
}

// Moves payload_offset_ past the sends that went out.
void StreamSender::advance_sends(std::size_t sent_msgs) {
  for (std::size_t k = 0; k < sent_msgs; ++k) {
    const auto* base = static_cast<const char*>(tx_iov_[k].iov_base);
    payload_offset_ = static_cast<std::size_t>(base - payload_.data()) + tx_iov_[k].iov_len;
  }
  if (payload_offset_ >= payload_.size()) payload_offset_ = 0;
}

// Sends until `window_` datagrams are in flight or the socket pushes back.
void StreamSender::top_up_window() {
  while (in_flight() < window_) {
    const auto n = static_cast<unsigned>(std::min<std::uint64_t>(window_ - in_flight(), batch_));
    const unsigned msgs = offload_ ? pack_gso_sends(n) : n;
    if (walk_) place_sends(msgs);
    const int r = ::sendmmsg(sock_.fd(), tx_.data(), msgs, MSG_DONTWAIT);
    if (r < 0) {
      if (is_transient(errno) || errno == ECONNREFUSED) return;  // retry next round
      throw_errno(fmt::format("sendmmsg {}{}", format_addr(receiver_),
                              offload_ ? " (UDP GSO send: EINVAL may mean a segment larger "
                                         "than the route's MTU, EIO a device without UDP "
                                         "segmentation)"
                                       : ""));
    }
    if (offload_) {
      // Each message (a GSO send) went whole: count its datagrams.
      for (std::size_t k = 0; k < static_cast<std::size_t>(r); ++k) {
        sent_ += tx_iov_[k].iov_len / datagram_size_;
      }
    } else {
      sent_ += static_cast<std::uint64_t>(r);
    }
    if (walk_) advance_sends(static_cast<std::size_t>(r));
    if (static_cast<unsigned>(r) < msgs) return;
  }
}

GoodputResults StreamSender::run(double warmup_s, double duration_s) {
  using Seconds = std::chrono::duration<double>;
  const auto start = Clock::now();
  const auto measure_at = start + std::chrono::duration_cast<Clock::duration>(Seconds(warmup_s));
  const auto end_at = measure_at + std::chrono::duration_cast<Clock::duration>(Seconds(duration_s));

  std::uint64_t stalls = 0;
  std::optional<Clock::time_point> t0;
  GoodputResults base;  // counters at the start of the measured interval
  auto last_credit = start, last_progress = start;
  top_up_window();
  for (;;) {
    const bool progressed = poll_credits();
    const auto now = Clock::now();
    if (progressed) {
      last_credit = last_progress = now;
    } else if (in_flight() > 0 && now - last_progress > kStallTimeout) {
      if (now - last_credit > kDeadReceiverTimeout) {
        throw RunError(fmt::format("no credit from {} for {} s; is the receiver running?",
                                   format_addr(receiver_), kDeadReceiverTimeout.count()));
      }
      written_off_ = sent_ - acked_.datagrams;
      ++stalls;
      last_progress = now;
    }
    if (!t0 && now >= measure_at) {
      t0 = now;
      base = {acked_.datagrams, acked_.bytes, 0, stalls, 0};
    }
    if (now >= end_at) {
      return {acked_.datagrams - base.datagrams, acked_.bytes - base.bytes,
              Seconds(now - *t0).count(), stalls - base.stalls, written_off_};
    }
    top_up_window();
  }
}

// ---------------------------------------------------------------------------
// Reporting

void report(baseline::Program& program, const Options& opt, const std::string& setup,
            const GoodputResults& res) {
  const double gbps = static_cast<double>(res.bytes) * 8 / 1e9 / res.duration_s;
  fmt::print(
      "udp_stream datagram={} B window={} batch={} offload={} message_bytes={} goodput={:.2f} "
      "Gbit/s ({} datagrams, {:.1f} MiB in {:.2f} s){}\n",
      opt.datagram_size, opt.window, opt.batch, opt.offload ? "on" : "off", opt.message_bytes, gbps,
      res.datagrams, static_cast<double>(res.bytes) / (1 << 20), res.duration_s,
      res.stalls ? fmt::format(" stalls={} lost={}", res.stalls, res.lost) : std::string());
  if (res.stalls != 0) {
    program.warn(fmt::format("{} stalls: the window was written off ({} datagrams lost in the run)",
                             res.stalls, res.lost));
  }
  program.check_trust();
  std::fflush(stdout);
  program.describe("udp", "goodput", setup,
                   {{"datagram_size", opt.datagram_size},
                    {"window", opt.window},
                    {"batch", opt.batch},
                    {"credit_every", opt.credit_every},
                    {"offload", opt.offload},
                    {"message_bytes", opt.message_bytes},
                    {"duration_s", opt.duration_s},
                    {"warmup_s", opt.warmup_s}});
  program.result().results.push_back({{"size", opt.datagram_size},
                                      {"window", opt.window},
                                      {"batch", opt.batch},
                                      {"duration_s", measure::round_to(res.duration_s, 6)},
                                      {"messages", res.datagrams},
                                      {"bytes", res.bytes},
                                      {"gbps", measure::round_to(gbps, 4)},
                                      {"stalls", res.stalls},
                                      {"lost", res.lost},
                                      {"offload", opt.offload},
                                      {"message_bytes", opt.message_bytes}});
  program.write_outputs();
}

// ---------------------------------------------------------------------------
// Modes

int run_server_mode(const std::string& bind, const Options& opt) {
  UdpSocket sock(kSocketBufferBytes);
  sock.bind(baseline::parse_endpoint("--bind", bind));
  if (opt.offload) enable_gro(sock);
  fmt::print(
      "udp_stream receiver: busy-polling on {} (batch {}, credit every {}, UDP GRO {}), "
      "Ctrl-C to stop\n",
      format_addr(sock.local_addr()), opt.batch, opt.credit_every, opt.offload ? "on" : "off");
  std::fflush(stdout);
  const std::atomic<bool> never{false};
  StreamReceiver(sock, opt.batch, opt.credit_every, opt.offload, opt.message_bytes)
      .run(/*stop_on_empty=*/false, never);
  return 0;
}

std::string describe_flow(const Options& opt) {
  const std::string offload =
      opt.offload ? fmt::format("UDP GSO sends of up to {} datagrams, UDP GRO receives",
                                gso_segments_per_send(opt.datagram_size))
                  : std::string("no UDP GSO/GRO");
  const std::string memory =
      opt.message_bytes > 0
          ? fmt::format("data from and into {}-byte buffers walked in order", opt.message_bytes)
          : std::string("data from and into cache-resident buffers");
  return fmt::format("sendmmsg/recvmmsg batch {}; {}; busy-polled; window {} datagrams; {}",
                     opt.batch, offload, opt.window, memory);
}

int run_client_mode(baseline::Program& program, const std::string& server, const Options& opt) {
  const sockaddr_in receiver = baseline::parse_endpoint("--server", server);
  StreamSender sender(receiver, opt);
  const GoodputResults res =
      program.measured(1, [&] { return sender.run(opt.warmup_s, opt.duration_s); });
  report(program, opt,
         fmt::format("sender (1 thread, unpinned) to udp_stream receiver {}; {}",
                     format_addr(receiver), describe_flow(opt)),
         res);
  return 0;
}

int run_combined_mode(baseline::Program& program, const Options& opt) {
  UdpSocket receiver_sock(kSocketBufferBytes);
  receiver_sock.bind(baseline::loopback_any_port());
  if (opt.offload) enable_gro(receiver_sock);  // before the thread: a refusal fails the run here
  const sockaddr_in receiver_addr = receiver_sock.local_addr();
  GoodputResults res;
  const std::string pinning = baseline::run_both(
      "udp_stream", receiver_addr,
      [&](const std::atomic<bool>& stop) {
        StreamReceiver(receiver_sock, opt.batch, opt.credit_every, opt.offload, opt.message_bytes)
            .run(/*stop_on_empty=*/true, stop);
      },
      [&] {
        StreamSender sender(receiver_addr, opt);
        res = program.measured(2, [&] { return sender.run(opt.warmup_s, opt.duration_s); });
        sender.send_stop();
      });
  report(program, opt,
         fmt::format("combined: 1 process over 127.0.0.1, {} (the server thread is the "
                     "receiver, the client the sender); {}; credit every {}",
                     pinning, describe_flow(opt), opt.credit_every),
         res);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  baseline::Program program("udp_stream", "raw_udp",
                            "Raw one-way UDP stream under a credit window: the goodput limit "
                            "librpc's large-message throughput is compared to. The client is "
                            "the sender, the server the receiver.",
                            argc, argv);
  Options opt;
  baseline::Modes modes(program, "0.0.0.0:7779",
                        {.client = [&](CLI::App& app) { add_load_options(app, opt); },
                         .server = [&](CLI::App& app) { add_receiver_options(app, opt); },
                         .shared = [&](CLI::App& app) { add_shared_options(app, opt); }});
  return program.run(argc, argv, [&] {
    if (modes.server()) return run_server_mode(modes.bind, opt);
    if (modes.client()) return run_client_mode(program, modes.server_address, opt);
    return run_combined_mode(program, opt);
  });
}
