// The `verbs` transport: RDMA verbs unreliable datagrams (one UD queue
// pair per Rpc), as eRPC does on InfiniBand and RoCE. Zero-copy sends from
// registered MsgBuffers (headers and control packets inlined), a posted
// receive ring, selective signaling, one address handle per remote port.
// Routing info is the port's GID, LID and the QP number.
//
// Exercised here on Soft-RoCE (rdma_rxe) inside a VM: scripts/rxe-vm.sh.
// Not exercised: InfiniBand fabrics (no GRH, LID routing), real RoCE NICs.
#pragma once

#include <infiniband/verbs.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "transport/handle_table.h"
#include "transport/transport.h"
#include "transport/verbs/gid_select.h"

namespace rpc::detail {

// Layout of verbs routing info inside RoutingInfo::bytes. resolve fills in
// the address handle.
struct VerbsRoutingInfo {
  uint8_t gid[16];
  uint32_t qpn;
  uint16_t lid;
  uint16_t magic;  // kVerbsRoutingMagic: rejects info from another transport
  ibv_ah* ah;      // set by resolve_remote_routing_info; never sent
};
inline constexpr uint16_t kVerbsRoutingMagic = 0x5642;  // "VB"
inline constexpr size_t kVerbsRoutingWireBytes = 24;    // gid + qpn + lid + magic
static_assert(sizeof(VerbsRoutingInfo) <= RoutingInfo::kMaxBytes);

// Where the receiver finds the sender's identity: UD receives start with a
// 40-byte GRH area. On RoCEv2 over IPv4 it holds the IPv4 header in its
// last 20 bytes; otherwise it is an IPv6/IB GRH whose source GID ends at
// byte 24.
inline constexpr size_t kGrhBytes = 40;

class VerbsTransport final : public Transport {
 public:
  // Opens the device (config.verbs_device, or the first one with an active
  // port when empty) and creates the UD queue pair. With verbs_gid_index -1
  // it picks the GID by select_gid (gid_select.h), matching nexus_ip (the
  // Nexus's address; empty: no match). Throws rpc::Error with what was
  // missing: no device, port down, bad GID index, too large a ring.
  explicit VerbsTransport(const RpcConfig& config, const std::string& nexus_ip = {});
  ~VerbsTransport() override;
  VerbsTransport(const VerbsTransport&) = delete;
  VerbsTransport& operator=(const VerbsTransport&) = delete;

  const char* name() const override { return "verbs"; }
  TransportCaps caps() const override { return caps_; }
  void tx_burst(std::span<const TxItem> items) override;
  void tx_flush() override {}
  size_t rx_burst(std::span<RxPacket> out) override;
  void post_recvs(size_t n) override;
  void fill_local_routing_info(RoutingInfo& out) const override;
  bool resolve_remote_routing_info(RoutingInfo& info) override;
  void release_remote_routing_info(const RoutingInfo& resolved) override;
  uint64_t src_key_of(const RoutingInfo& resolved) const override;
  Result<MemReg> register_memory(void* addr, size_t len) override;
  void deregister_memory(const MemReg& reg) override;
  // Registers exactly the payload for remote read (no local or remote
  // write), and deregisters it on revoke: the rkey dies with the transfer.
  bool expose_for_read(const void* addr, size_t len, Exposure& out) override;
  void revoke_exposure(Exposure& exposure) override;
  // One-sided bulk transfers need RC queue pairs; not built yet, so caps()
  // says bulk = false and the engine sends large messages as datagrams.
  bool post_read(const BulkOp&) override { return false; }
  bool post_write(const BulkOp&) override { return false; }
  size_t poll_bulk(std::span<BulkCompletion>) override { return 0; }

  // "rxe0 port 1, GID 1: <why that GID>": what the benchmarks print.
  std::string provider() const override;
  const std::string& device_name() const { return device_name_; }
  // The GID index the port is addressed by, and why: configured, or chosen.
  const GidChoice& gid_choice() const { return gid_choice_; }
  // Send completions that reported an error (the datagram was lost).
  uint64_t tx_errors() const { return tx_errors_; }
  // Address handles held for peers: those some resolved, not yet released
  // routing info uses, plus released ones waiting for sends still queued
  // on them.
  size_t num_remote_entries() const { return ahs_.size() + retired_ahs_.size(); }

  static constexpr size_t kMaxBatch = 32;
  static constexpr uint32_t kQkey = 0x11111111;  // every librpc UD QP uses it

 private:
  void cleanup() noexcept;
  void post_recv_range(size_t first, size_t n);
  void reap_signaled_send();
  void destroy_retired_ahs();
  uint64_t key_from_grh(const uint8_t* grh) const;

  TransportCaps caps_;
  std::string device_name_;
  uint8_t port_ = 1;
  int gid_index_ = 0;
  GidChoice gid_choice_;
  bool use_grh_ = true;    // RoCE (and IB across subnets): address by GID
  bool ipv4_gid_ = false;  // the GID is IPv4-mapped (RoCEv2 over IPv4)
  ibv_gid local_gid_{};
  uint16_t local_lid_ = 0;
  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_cq* send_cq_ = nullptr;
  ibv_cq* recv_cq_ = nullptr;
  ibv_qp* qp_ = nullptr;
  ibv_mr* ring_mr_ = nullptr;
  size_t sq_depth_ = 0;

  // RX ring: rx_ring_size buffers of kGrhBytes + max_pkt_bytes, posted in
  // order; UD receives complete in the order they were posted.
  std::vector<uint8_t> ring_mem_;
  size_t ring_buf_bytes_ = 0;
  size_t ring_next_post_ = 0;  // the next buffer post_recvs gives back
  std::vector<ibv_recv_wr> recv_wrs_;
  std::vector<ibv_sge> recv_sges_;
  std::array<ibv_wc, kMaxBatch> wcs_{};

  // TX: one chained post per burst; every kSignalEvery-th send signaled.
  std::array<ibv_send_wr, kMaxBatch> send_wrs_{};
  std::array<std::array<ibv_sge, 2>, kMaxBatch> send_sges_{};
  uint64_t sends_posted_ = 0;
  bool signaled_outstanding_ = false;
  uint64_t signaled_seq_ = 0;   // sends_posted_ when the outstanding signaled send went
  uint64_t completed_seq_ = 0;  // every send up to this one has completed
  uint64_t tx_errors_ = 0;

  // Address handles by remote (GID, LID), counted: each resolve takes a
  // reference, each release drops one.
  struct AhEntry {
    ibv_ah* ah;
    size_t refs;
  };
  std::map<std::array<uint8_t, 18>, AhEntry> ahs_;
  // Handles no session uses any more that sends still queued may name (a
  // provider may read the AH when it processes the send, not when it is
  // posted; rxe does): destroyed once every send up to `seq` has completed
  // (seen at the next signaled completion, within 2 * kSignalEvery sends),
  // or once kRetiredAhGrace has passed (a posted UD send is long done by
  // then), so churn without traffic cannot pile them up either.
  struct RetiredAh {
    ibv_ah* ah;
    uint64_t seq;
    std::chrono::steady_clock::time_point retired_at;
  };
  static constexpr std::chrono::milliseconds kRetiredAhGrace{100};
  std::vector<RetiredAh> retired_ahs_;

  HandleTable<ibv_mr*> exposures_;  // live exposures
};

}  // namespace rpc::detail
