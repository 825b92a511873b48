// The `verbs` transport: RDMA verbs unreliable datagrams (one UD queue
// pair per Rpc), as eRPC does on InfiniBand and RoCE. Zero-copy sends from
// registered MsgBuffers (headers and control packets inlined), a posted
// receive ring, selective signaling, one address handle per remote port.
// Routing info is the port's GID, LID and the QP number (verbs_routing.h).
// Large messages: RDMA READ over RC queue pairs, one per (client Rpc,
// server Rpc) pair, set up inside session connect (verbs_rc.cc), or over
// mlx5 Dynamically Connected transport where the device has it (one DC
// initiator and one target per Rpc, verbs_dc.cc); RpcConfig::verbs_bulk
// chooses (bulk_select.h).
//
// Exercised here on Soft-RoCE (rdma_rxe) inside a VM: scripts/rxe-vm.sh.
// Not exercised: InfiniBand fabrics (no GRH, LID routing), real RoCE NICs.
#pragma once

#include <infiniband/verbs.h>

struct mlx5dv_qp_ex;  // infiniband/mlx5dv.h, included by verbs_dc.cc only

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "transport/handle_table.h"
#include "transport/transport.h"
#include "transport/verbs/bulk_select.h"
#include "transport/verbs/gid_select.h"
#include "transport/verbs/verbs_routing.h"

namespace rpc::detail {

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
  size_t rx_burst(std::span<RxPacket> out) override;
  void post_recvs(size_t n) override;
  void fill_local_routing_info(RoutingInfo& out) const override;
  bool resolve_remote_routing_info(RoutingInfo& info) override;
  void release_remote_routing_info(const RoutingInfo& resolved) override;
  uint64_t src_key_of(const RoutingInfo& resolved) const override;
  Result<MemReg> register_memory(void* addr, size_t len) override;
  void deregister_memory(const MemReg& reg) override;
  // A type-2B memory window over exactly the payload, bound on the
  // reader's RC QP (readable through it alone) and invalidated on revoke;
  // on devices without such windows, and to a peer reading over DC, a
  // registration of the payload with remote read only, deregistered on
  // revoke (verbs_expose.cc).
  bool expose_for_read(const RoutingInfo& reader, const void* addr, size_t len, const MemReg& reg,
                       Exposure& out) override;
  void revoke_exposure(Exposure& exposure) override;
  // RC READ bulk path (verbs_rc.cc). A client offers an RC QP in INIT with
  // each connect; the server connects one to it (or reuses the one it has
  // for that client Rpc) and answers with its QP; the client connects its
  // offer, or reuses its QP already connected to that server.
  bool prepare_connect(RoutingInfo& offer, uint64_t peer_hint) override;
  void fill_connect_answer(const RoutingInfo& resolved, RoutingInfo& out) const override;
  bool resolve_connect_answer(RoutingInfo& answer, const RoutingInfo& offer) override;
  void cancel_connect(const RoutingInfo& offer) override;
  // Reads on the route's RC QP, split into work requests of at most
  // max_read_wr_bytes; beyond the QP's read slots they wait in a queue.
  // False only when the route has no working RC QP.
  bool post_read(const BulkOp& op) override;
  size_t poll_bulk(std::span<BulkCompletion> out) override;
  uint64_t bulk_path_of(const RoutingInfo& resolved) const override;
  size_t poll_failed_bulk_paths(std::span<uint64_t> out) override;
  // Moves every RC QP to the error state and reaps the flushed reads.
  void quiesce_bulk() override;

  // The bulk path this transport offers peers (it also serves RC to peers
  // that offer RC when it uses DC), and why that one.
  VerbsBulkKind bulk_kind() const { return bulk_kind_; }
  const std::string& bulk_reason() const { return bulk_reason_; }

  // For tests: RC QPs alive (offers included), the QP and CQ of a resolved
  // route (an intruder test posts raw work requests on them), and the
  // largest work request a read is split into.
  size_t num_rc_qps() const { return rc_conns_.size() - free_rc_.size(); }
  ibv_qp* rc_qp_of(const RoutingInfo& resolved) const;
  ibv_cq* rc_cq() const { return rc_cq_; }
  uint32_t max_read_wr_bytes() const { return max_read_wr_bytes_; }
  // Whether exposures are memory windows (the device has type-2B ones),
  // and, for tests, a way to use registrations instead where it does.
  bool exposes_by_window() const { return use_mw_; }
  void use_memory_windows(bool on) { use_mw_ = on && mw_supported_; }

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
    std::array<uint8_t, 18> key;
  };
  std::map<std::array<uint8_t, 18>, uint32_t> ahs_;  // -> index into ah_entries_
  std::vector<AhEntry> ah_entries_;                  // ah == nullptr: a free slot
  std::vector<uint32_t> free_ah_entries_;
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

  // --- exposures (verbs_expose.cc) ---
  struct ExposureEntry {
    ibv_mr* mr = nullptr;   // a registration of the payload (no windows)
    ibv_mw* mw = nullptr;   // or a window bound on rc_conns_[conn]
    uint32_t conn = 0;      // the RC connection the window is bound on,
    uint32_t conn_gen = 0;  // while its generation is this one
    bool operator==(const ExposureEntry&) const = default;
  };
  // wr_id of memory-window operations; reads' wr_ids are op indexes.
  static constexpr uint64_t kMwOpTag = uint64_t{1} << 63;
  static constexpr size_t kMwCqRoom = 16;
  bool expose_by_window(uint32_t conn, const void* addr, size_t len, const MemReg& reg,
                        Exposure& out);
  bool run_mw_op(uint32_t conn, ibv_send_wr& wr);
  void cleanup_exposures() noexcept;
  HandleTable<ExposureEntry> exposures_;  // live exposures
  std::vector<ibv_mw*> free_mws_;         // invalidated windows, to bind again
  bool mw_supported_ = false;             // the device has type-2B windows
  bool use_mw_ = false;
  uint64_t mw_op_seq_ = 0;
  size_t stray_mw_ops_ = 0;  // timed out; their completions may still come

  // --- RC READ (verbs_rc.cc) ---
  // The remote Rpc an RC QP talks to: its port (GID, LID) and UD QP number.
  using PeerKey = std::array<uint8_t, 22>;
  enum class RcState : uint8_t { kFree, kOffered, kConnected, kFailed };
  struct RcConn {
    ibv_qp* qp = nullptr;
    RcState state = RcState::kFree;
    uint32_t gen = 0;  // bumped on reuse of the slot: bulk path ids never repeat
    uint32_t psn = 0;  // our first packet sequence number
    uint32_t remote_qpn = 0;
    PeerKey peer{};
    bool dc = false;            // the DC initiator: reads to any peer's DC target
    bool client = false;        // we offered it (keyed by hint), or answered with it
    uint64_t hint = 0;          // client: the server Rpc it serves
    uint8_t max_rd_atomic = 1;  // reads in flight at once: min(ours, the peer's)
    size_t refs = 0;            // offers and resolved routes that use it
    uint32_t wrs_in_flight = 0;
    uint32_t queue_head = kNoOp;  // reads waiting for read slots, oldest first
    uint32_t queue_tail = kNoOp;
  };
  // One read the engine posted; split into work requests as slots free up.
  struct ReadOp {
    uint64_t cookie = 0;
    uint32_t conn = 0;
    uint32_t next = kNoOp;  // in the connection's queue
    uint8_t* local_addr = nullptr;
    uint32_t lkey = 0;
    uint64_t remote_addr = 0;
    uint32_t rkey = 0;
    uint32_t len = 0;
    uint32_t posted_bytes = 0;
    uint32_t wrs_outstanding = 0;
    bool failed = false;
    // Over DC: the target (its port's address handle, DCT number, access
    // key) and the peer's bulk path, which an error on this read fails.
    ibv_ah* dc_ah = nullptr;
    uint32_t dct_num = 0;
    uint64_t dc_key = 0;
    uint64_t dc_path = 0;
  };
  static constexpr uint32_t kNoOp = UINT32_MAX;

  void init_rc(const ibv_device_attr& da, const ibv_port_attr& pa);
  void choose_bulk(VerbsBulk wanted);
  void cleanup_rc() noexcept;
  bool accept_rc_offer(const VerbsRoutingWire& offer, uint32_t& rc_index);
  uint32_t create_rc_qp();
  bool connect_rc(uint32_t index, const VerbsRoutingWire& remote);
  void release_rc(uint32_t index);
  void fail_rc(uint32_t index);
  void stop_rc(uint32_t index);
  void unlist_rc(uint32_t index, bool offer_too);
  void pump_rc(uint32_t index);
  void on_read_completion(const ibv_wc& wc, std::span<BulkCompletion> out, size_t* n);
  bool resolve_ah(const VerbsRoutingWire& w, uint32_t& ah_index);
  void release_ah(uint32_t ah_index);
  static PeerKey peer_key_of(const VerbsRoutingWire& w);
  uint32_t rc_index_by_qpn(uint32_t qpn) const;
  uint32_t bulk_route_for(const VerbsRoutingWire& peer);
  bool resolve_datagram_route(const VerbsRoutingWire& w, RoutingInfo& answer);
  bool post_read_wr(RcConn& c, ReadOp& r, uint32_t op_index, uint32_t chunk);

  // --- DC (verbs_dc.cc; without mlx5dv, init_dc says so and the rest is
  // never reached) ---
  DcAvailability init_dc(std::string& error);
  void cleanup_dc() noexcept;
  bool post_dc_read(ReadOp& r, uint32_t op_index, uint32_t chunk);
  void fail_dc_read(ReadOp& r, bool flushed);
  void recover_dci();
  static uint64_t dc_path_of(const VerbsRoutingWire& w);

  VerbsBulkKind bulk_kind_ = VerbsBulkKind::kNone;
  std::string bulk_reason_;
  ibv_srq* dc_srq_ = nullptr;     // a DC target needs one; nothing is ever posted to it
  ibv_qp* dct_ = nullptr;         // peers' reads of our exposures arrive here
  ibv_qp_ex* dci_qpx_ = nullptr;  // the initiator (rc_conns_[dci_index_].qp)
  mlx5dv_qp_ex* dci_mqpx_ = nullptr;
  uint32_t dci_index_ = kNoRcIndex;
  uint64_t dc_key_ = 0;  // our DC target's access key: random per Rpc

  ibv_cq* rc_cq_ = nullptr;
  uint32_t rc_cq_depth_ = 0;       // bounds work requests in flight over all RC QPs
  uint32_t rc_wrs_in_flight_ = 0;  // over all RC QPs
  uint8_t local_rd_atomic_ = 1;    // reads our RC QPs serve / issue at once (device limits)
  uint8_t local_init_rd_atomic_ = 1;
  ibv_mtu path_mtu_ = IBV_MTU_1024;
  uint32_t max_read_wr_bytes_ = 0;  // min(port max_msg_sz, kMaxReadWrBytes)
  std::vector<RcConn> rc_conns_;
  std::vector<uint32_t> free_rc_;
  std::map<PeerKey, uint32_t> rc_by_peer_;                 // server: the client Rpc's current QP
  std::unordered_map<uint64_t, uint32_t> rc_by_hint_;      // client: connected QP per server Rpc
  std::unordered_map<uint64_t, uint32_t> offers_by_hint_;  // client: pending offer per server
  std::vector<ReadOp> read_ops_;
  std::vector<uint32_t> free_read_ops_;
  std::vector<BulkCompletion> ready_;   // reads failed outside a CQ poll, still to report
  std::vector<uint64_t> failed_paths_;  // to report through poll_failed_bulk_paths
  std::array<ibv_wc, kMaxBatch> rc_wcs_{};
};

}  // namespace rpc::detail
