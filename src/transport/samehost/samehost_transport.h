// The `samehost` transport: two processes on one host, through memory they
// share (docs/transports.md). Not libfabric's `shm` provider: this one is
// ours, needs nothing but libc, and lives in librpc.so.
//
// - A channel per session: a memfd region (samehost_ring.h) the server
//   creates at connect and hands only to the process that asked for it, on
//   its Unix socket (SCM_RIGHTS, SO_PEERCRED and the offer's token
//   checked; samehost_watch.h).
// - Small messages: packets written in place into the peer's ring slot,
//   read in place from ours (the engine's zero-copy RX). Credits,
//   retransmission and at-most-once stay the engine's.
// - Large messages: one copy, by the kernel, from the sender's buffer into
//   the receiver's (process_vm_readv), where the kernel allows it: exactly
//   where the receiver could ptrace the sender, so it is handed nothing it
//   could not take. Elsewhere they travel as packets.
// - A peer that dies is noticed by its socket's hang-up or its pidfd; its
//   sessions end with SmErr::kPeerExited.
#pragma once

#include <sys/types.h>

#include <memory>
#include <vector>

#include "transport/samehost/samehost_ring.h"
#include "transport/samehost/samehost_setup.h"
#include "transport/samehost/samehost_watch.h"
#include "transport/transport.h"

namespace rpc::detail {

class SamehostTransport final : public Transport {
 public:
  // Starts the transport's listener and watch thread. Throws rpc::Error.
  explicit SamehostTransport(const RpcConfig& config);
  ~SamehostTransport() override;

  const char* name() const override { return "samehost"; }
  TransportCaps caps() const override { return caps_; }
  void tx_burst(std::span<const TxItem> items) override;
  size_t rx_burst(std::span<RxPacket> out) override;
  void post_recvs(size_t n) override;

  void fill_local_routing_info(RoutingInfo& out) const override;
  bool resolve_remote_routing_info(RoutingInfo& info) override;
  void release_remote_routing_info(const RoutingInfo& resolved) override;
  uint64_t src_key_of(const RoutingInfo& resolved) const override;
  bool prepare_connect(RoutingInfo& offer, uint64_t peer_hint) override;
  void fill_connect_answer(const RoutingInfo& resolved, RoutingInfo& out) const override;
  bool resolve_connect_answer(RoutingInfo& answer, const RoutingInfo& offer) override;

  Result<MemReg> register_memory(void*, size_t) override { return MemReg{}; }
  void deregister_memory(const MemReg&) override {}

  bool expose_for_read(const RoutingInfo& reader, const void* addr, size_t len, const MemReg& reg,
                       Exposure& out) override;
  bool post_read(const BulkOp& op) override;
  size_t poll_bulk(std::span<BulkCompletion> out) override;
  uint64_t bulk_path_of(const RoutingInfo& resolved) const override { return src_key_of(resolved); }
  size_t poll_failed_bulk_paths(std::span<uint64_t> out) override;
  SmErr bulk_path_failure_reason(uint64_t path) const override;
  void quiesce_bulk() override { reads_.clear(); }

  // For tests and stats: slots with an impossible length, sends dropped
  // because the peer's ring was full, channels alive.
  uint64_t malformed_slots() const { return malformed_slots_; }
  uint64_t tx_ring_full() const { return tx_ring_full_; }
  size_t live_channels() const { return live_channels_; }
  const samehost::Geometry& geometry() const { return geometry_; }
  size_t pending_accepts_for_testing() const { return watch_->pending_accepts(); }

  // process_vm_readv bytes per poll_bulk call: a large read is split over
  // event-loop iterations so that it does not hold up small messages long.
  static constexpr size_t kReadBytesPerPoll = 4 << 20;
  static constexpr std::chrono::milliseconds kHandshakeTimeout{2000};
  // Nothing is lost between honest peers (their credits keep each ring
  // from filling), so a timeout is a descheduled peer: resend only after
  // much longer than any preemption of a busy machine's core.
  static constexpr uint64_t kMinRtoUs = 50'000;

 private:
  struct Channel {
    uint32_t gen = 1;
    bool live = false;    // a session's route holds it
    bool polled = false;  // in polled_ (live and not failed)
    bool failed = false;  // reported, or being reported, as failed
    SmErr fail_reason = SmErr::kNone;
    pid_t peer_pid = 0;
    bool we_read_peer = false;  // our probe of the peer's memory worked
    samehost::Mapping mapping;
    samehost::RingWriter tx;
    samehost::RingReader rx;
    uint32_t handed_out = 0;  // packets the engine holds
    std::shared_ptr<samehost::ChannelLink> link;
  };
  struct Read {
    pid_t pid;
    uint64_t key;
    uint8_t* local;
    uint64_t remote;
    size_t len;
    size_t done;
    uint64_t cookie;
  };
  struct HandedOut {
    uint32_t channel;
    uint64_t position;  // the ring position after the packet
  };

  static uint64_t key_of(uint32_t index, uint32_t gen) { return uint64_t{gen} << 32 | index; }
  Channel* channel_of(const RoutingInfo& resolved) const;
  Channel* channel_by_key(uint64_t key) const;
  uint32_t new_channel();
  void activate(uint32_t index, uint32_t peer_pid, RoutingInfo& out);
  void start_polling(uint32_t index);
  void stop_polling(uint32_t index);
  // keep_polled: the caller is walking polled_ and takes it out after.
  void fail_channel(uint32_t index, SmErr reason, bool keep_polled = false);
  void free_channel(uint32_t index);
  void finish_read(size_t i, bool ok, std::span<BulkCompletion> out, size_t& n);

  TransportCaps caps_;
  samehost::Geometry geometry_;
  pid_t pid_;
  uint64_t nonce_;
  // The word peers read to learn whether process_vm_readv on us works.
  alignas(8) uint64_t probe_word_;
  std::unique_ptr<samehost::Watch> watch_;
  std::vector<std::unique_ptr<Channel>> channels_;
  std::vector<uint32_t> free_channels_;
  std::vector<uint32_t> polled_;  // channels rx_burst looks at
  size_t poll_start_ = 0;         // round robin over polled_
  size_t live_channels_ = 0;
  // Packets handed to the engine, oldest first (a ring of kMaxHandedOut).
  static constexpr size_t kMaxHandedOut = 256;  // at least the engine's RX burst
  std::vector<HandedOut> handed_;
  size_t handed_head_ = 0;
  size_t handed_count_ = 0;
  // RpcConfig::samehost_copy_rx: a private copy of each handed-out packet,
  // one slot's worth per entry of handed_ (empty when reading in place).
  bool copy_rx_ = false;
  std::vector<uint8_t> rx_copies_;
  std::vector<Read> reads_;  // posted reads, oldest first
  std::vector<samehost::FailedChannel> local_failed_;
  uint64_t malformed_slots_ = 0;
  uint64_t tx_ring_full_ = 0;
};

}  // namespace rpc::detail
