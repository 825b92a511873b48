// The `fabric` transport: libfabric reliable-datagram endpoints (FI_EP_RDM),
// the interface AWS EFA offers. One endpoint per Rpc with an address vector,
// zero-copy sends from registered MsgBuffers (small packets injected), a
// posted receive ring, and one-sided fi_read/fi_write for bulk transfers
// where the provider has RMA with virtual addressing. On shm, whose RMA
// cannot be trusted, reads go by tagged message instead (tagged_read.h).
//
// Exercised here with the tcp;ofi_rxm and shm providers, which run the same
// FI_EP_RDM calls as efa. Not exercised: efa itself (no EFA device).
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "transport/fabric/tagged_read.h"
#include "transport/handle_table.h"
#include "transport/transport.h"

namespace rpc::detail {

// Layout of fabric routing info inside RoutingInfo::bytes: the endpoint's
// name from fi_getname, then (after resolve) its address-vector handle.
struct FabricRoutingInfo {
  uint16_t magic;  // kFabricRoutingMagic: rejects info from another transport
  uint8_t addr_len;
  uint8_t reserved;
  uint8_t addr[36];
  fi_addr_t fi_addr;  // set by resolve_remote_routing_info; never sent
};
inline constexpr uint16_t kFabricRoutingMagic = 0x4642;  // "FB"
inline constexpr size_t kFabricRoutingWireBytes = 40;    // up to fi_addr
static_assert(sizeof(FabricRoutingInfo) <= RoutingInfo::kMaxBytes);

class FabricTransport final : public Transport {
 public:
  // Opens an RDM endpoint of config.fabric_provider (empty: the first
  // provider libfabric offers that has what we need), bound to bind_ip
  // where the provider addresses by IP. Throws rpc::Error naming what is
  // missing.
  FabricTransport(const RpcConfig& config, const std::string& bind_ip);
  ~FabricTransport() override;
  FabricTransport(const FabricTransport&) = delete;
  FabricTransport& operator=(const FabricTransport&) = delete;

  const char* name() const override { return "fabric"; }
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
  // Registers exactly the payload with FI_REMOTE_READ only, under a random
  // requested key (or the provider's, FI_MR_PROV_KEY); closed on revoke.
  // Any peer with the key may read it: RDM endpoints have no per-peer
  // binding of a registration. On shm (tagged reads) the exposure is an
  // entry in our own table, answered only to `reader` where it is a
  // resolved route.
  bool expose_for_read(const RoutingInfo& reader, const void* addr, size_t len, const MemReg& reg,
                       Exposure& out) override;
  void revoke_exposure(Exposure& exposure) override;
  void quiesce_bulk() override;
  // Live exposures (tests: every transfer's exposure ends).
  size_t num_exposures() const { return exposures_.live() + tagged_exposures_.live(); }
  bool post_read(const BulkOp& op) override { return post_rma(op, /*write=*/false); }
  // The engine never writes to a peer. Tests act as a hostile peer with
  // this: a write into an exposure must fail (FI_REMOTE_READ only; with
  // tagged reads there is no remote write at all, and it fails at once).
  bool post_write_for_testing(const BulkOp& op) { return post_rma(op, /*write=*/true); }
  // True when bulk reads go by tagged message (shm), not by RMA.
  bool tagged_reads() const { return tagged_bulk_; }
  // Tagged reads: requests for exposures of ours that we served, refused,
  // or dropped as malformed; and reads of ours given up unanswered.
  struct TaggedReadStats {
    uint64_t served = 0;
    uint64_t refused = 0;
    uint64_t malformed = 0;
    uint64_t timed_out = 0;
  };
  const TaggedReadStats& tagged_read_stats() const { return tagged_stats_; }
  // Tests: our tagged receives posted (reads' parts).
  size_t tagged_receives_posted() const { return tagged_reads_posted_; }
  // Tests act as a hostile peer with this: any bytes, sent as a read
  // request to the owner of exposures at `owner` (a resolved route). False
  // when the provider did not take it (shm: until the owner has polled once).
  bool send_read_request_for_testing(const RoutingInfo& owner, const uint8_t* bytes, size_t len);
  // Tests: how long a tagged read may wait for its answer.
  void set_tagged_read_timeout_ms(uint64_t ms) { tagged_read_timeout_ns_ = ms * 1'000'000; }
  size_t poll_bulk(std::span<BulkCompletion> out) override;

  std::string provider() const override { return provider_; }
  const std::string& provider_name() const { return provider_; }
  // True when the provider reports each message's source (FI_SOURCE), so
  // the engine can check that a session's packets come from its peer.
  bool knows_sources() const { return has_source_; }
  uint64_t tx_dropped() const { return tx_dropped_; }
  // Sends and one-sided operations not completed yet (posted or waiting),
  // and datagrams still waiting for the provider (tests: a peer has
  // received what was sent).
  // For tests and measurement: the part size of pipelined reads (0: one
  // read per message), and operations with parts outstanding.
  void set_read_chunk_bytes(uint32_t bytes) { read_chunk_bytes_ = bytes; }
  size_t bulk_ops_in_flight() const { return parents_.live(); }
  size_t sends_outstanding() const { return tx_ctx_.size() - tx_free_.size() + pending_count_; }
  // Address-vector entries held for peers (one per remote endpoint that
  // some resolved, not yet released routing info names).
  size_t num_remote_entries() const { return av_entries_.size(); }

  static constexpr size_t kMaxBatch = 32;

  // The floor under every session's RTO (TransportCaps::min_rto_us). An
  // RDM endpoint is reliable: what the provider accepts arrives, or the
  // connection fails, which the engine hears about otherwise. Only our own
  // drops are lost (the send FIFO full, a send the provider refuses for
  // good), so a timeout almost always means a peer that was descheduled
  // or is still reading a large request, and with the 5 ms floor those
  // resent requests nobody had lost (docs/transports.md, "Goodput over
  // tcp;ofi_rxm").
  static constexpr uint64_t kMinRtoUs = 50'000;

 private:
  // kReadRequest: a posted receive for peers' read requests (tagged
  // reads); kExposeSend: our answer to one, a tagged send of an exposure.
  enum class OpKind : uint8_t { kSend, kRecv, kBulk, kReadRequest, kExposeSend };
  // Per-operation context. libfabric may use the fi_context2 (FI_CONTEXT
  // mode) until the operation completes; it must come first.
  struct OpContext {
    fi_context2 fi;
    OpKind kind;
    uint32_t index;   // RX ring buffer, read-request buffer, or exposure handle
    uint32_t parent;  // bulk: the operation this part of it belongs to (parents_)
    // Tagged reads: the part's length (a shorter answer is a refusal), and
    // when its receive was posted (0: not posted, e.g. still waiting).
    uint32_t expected_len;
    uint64_t posted_ns;
    uint64_t key;    // kExposeSend: the exposure's key (its handle may be reused)
    fi_addr_t peer;  // kBulk: the owner asked; kExposeSend: the reader answered
    bool timed_out;  // kBulk: cancelled by expire_tagged_reads
  };
  // A one-sided operation, posted as one or more parts (pipelined reads);
  // reported to the engine when its last part completes.
  struct BulkParent {
    uint64_t cookie = 0;
    uint32_t outstanding = 0;  // parts not completed; > 0 while live
    bool failed = false;
    bool operator==(const BulkParent&) const = default;
  };
  // Reads longer than this go as several fi_reads in flight at once, at
  // most kMaxReadParts (LIBRPC_FABRIC_READ_CHUNK_BYTES overrides it; 0: one
  // read per message). Chosen by measurement: docs/transports.md.
  static constexpr uint32_t kDefaultReadChunkBytes = 1u << 20;
  static constexpr size_t kMaxReadParts = 16;

  void cleanup() noexcept;
  // fi_mr_reg with a key of ours where the provider takes requested keys
  // (random, retried if taken), bound to the endpoint where it must be.
  int register_region(const void* addr, size_t len, uint64_t access, fid_mr** mr);
  bool exposures_are_distinct(const MemReg& ring);
  bool expose(const void* addr, size_t len, Exposure& out);
  bool post_rma(const BulkOp& op, bool write);
  // A one-sided operation holding its context: posted, or waiting because
  // the provider refused it for now (-FI_EAGAIN: e.g. a read on a
  // connection rxm is still accepting; without verbs' flow control, which
  // rxm's shared receive context turns off, the peer's request can arrive
  // first). Waiting ones are retried in order on every poll.
  struct PendingRma {
    OpContext* ctx;
    fi_addr_t peer;
    uint8_t* local_addr;
    void* local_desc;
    uint64_t remote_addr;
    uint64_t remote_key;
    uint32_t len;
    bool write;
  };
  ssize_t issue_rma(const PendingRma& r);
  // Tagged reads (shm): the reader's side posts the receive and asks; the
  // owner's side answers from its table of exposures.
  ssize_t issue_tagged_read(const PendingRma& r);
  void drain_read_requests();
  void post_read_request_recv(uint32_t index);
  void serve_read_request(uint32_t index, size_t len, fi_addr_t source);
  void refuse_read(fi_addr_t source, uint64_t tag);
  void finish_expose_send(const OpContext* ctx);
  // err: 0, or the completion's error (FI_ECANCELED, FI_ETRUNC, ...).
  void handle_tagged_completion(OpContext* ctx, size_t len, fi_addr_t source, int err);
  void expire_tagged_reads();
  void forget_tagged_peer(fi_addr_t peer);
  bool expose_tagged(const RoutingInfo& reader, const void* addr, size_t len, const MemReg& reg,
                     Exposure& out);
  void finish_bulk_part(OpContext* ctx, bool ok);
  void drain_pending_rma();
  void fail_pending_rma_to(fi_addr_t peer);
  void post_recv(uint32_t index);
  void progress_tx();  // reaps send and bulk completions
  // A datagram the provider could not take yet (-FI_EAGAIN: e.g. the
  // first message to a peer while rxm connects). Small ones are copied;
  // large ones point into their MsgBuffer, which outlives the request.
  struct PendingSend {
    fi_addr_t dest;
    const uint8_t* hdr;
    const uint8_t* data;
    uint32_t data_len;
    uint32_t lkey;                  // of the data
    uint32_t hdr_lkey;              // of the header
    std::array<uint8_t, 256> copy;  // header + data when injected
  };
  enum class SendResult : uint8_t { kSent, kAgain, kFailed };
  SendResult try_send(const PendingSend& p);
  void queue_pending(const TxItem& item);
  void drain_pending();
  OpContext* take_tx_context();
  uint64_t make_src_key(fi_addr_t addr) const;

  TransportCaps caps_;
  std::string provider_;
  bool has_source_ = false;
  bool cq_sources_ = false;  // fi_cq_readfrom (the provider has FI_SOURCE)
  bool tagged_bulk_ = false;
  bool virt_addr_ = false;
  bool endpoint_mr_ = false;
  fi_info* info_ = nullptr;
  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
  fid_av* av_ = nullptr;
  fid_cq* tx_cq_ = nullptr;
  fid_cq* rx_cq_ = nullptr;
  fid_ep* ep_ = nullptr;
  std::array<uint8_t, 36> local_addr_{};
  size_t local_addr_len_ = 0;

  // RX ring; buffers are re-posted in the order the engine returns them.
  std::vector<uint8_t> ring_mem_;
  void* ring_desc_ = nullptr;
  std::vector<OpContext> rx_ctx_;
  // Buffers handed to the engine, oldest first (a ring of ring-size slots).
  std::vector<uint32_t> handed_out_;
  size_t handed_head_ = 0;
  size_t handed_count_ = 0;

  // TX: operations complete in any order, so their contexts come from a
  // free list; at most tx_depth sends and bulk operations are outstanding.
  std::vector<OpContext> tx_ctx_;
  std::vector<OpContext*> tx_free_;
  // FIFO of sends waiting for the provider; full means drop (the RTO
  // recovers), so a peer that never accepts cannot stall the event loop.
  static constexpr size_t kMaxPending = 256;
  std::vector<PendingSend> pending_;
  size_t pending_head_ = 0;
  size_t pending_count_ = 0;
  uint64_t tx_dropped_ = 0;
  std::vector<BulkCompletion> bulk_done_;
  std::vector<PendingRma> pending_rma_;  // oldest first
  HandleTable<BulkParent> parents_;      // operations with parts in flight or waiting
  uint32_t read_chunk_bytes_ = kDefaultReadChunkBytes;

  // Registered regions by lkey (TxItem carries the lkey, sends need the
  // descriptor).
  struct Region {
    fid_mr* mr = nullptr;
    void* desc = nullptr;
  };
  std::vector<Region> regions_;
  std::vector<uint32_t> free_region_ids_;
  bool prov_key_ = false;
  uint64_t key_mask_ = UINT64_MAX;  // requested keys fit mr_key_size bytes
  HandleTable<fid_mr*> exposures_;  // live exposures

  // Tagged reads. Our exposures: what a request may name.
  struct TaggedExposure {
    const uint8_t* addr = nullptr;
    uint64_t len = 0;
    uint64_t key = 0;
    void* desc = nullptr;
    fi_addr_t reader = FI_ADDR_UNSPEC;  // FI_ADDR_UNSPEC: not bound to one peer
    bool reader_gone = false;           // its address-vector entry was removed
    uint32_t sends_in_flight = 0;
    bool operator==(const TaggedExposure&) const = default;
  };
  HandleTable<TaggedExposure> tagged_exposures_;
  // Answers in flight per exposure: an honest reader asks once per part.
  static constexpr uint32_t kMaxSendsPerExposure = 2 * kMaxReadParts;
  // Posted receives for read requests, re-posted as each is served.
  static constexpr uint32_t kReadRequestBuffers = 64;
  // Reads of ours posted at once (more wait, in order); with the request
  // buffers, the room they take in the provider's receive queue.
  static constexpr size_t kMaxTaggedReads = 64;
  static constexpr size_t kTaggedRecvRoom = kReadRequestBuffers + kMaxTaggedReads;
  // Answers in flight to one reader (each holds a context until the reader
  // takes it in), and contexts never given to answers (kept for datagrams).
  static constexpr uint32_t kMaxAnswersPerPeer = 2 * kMaxReadParts;
  static constexpr size_t kContextsKeptForSends = 2 * kMaxBatch;
  std::vector<uint32_t> answers_to_peer_;  // by fi_addr

  static constexpr size_t kReadRequestBufBytes = 64;  // longer ones are truncated: dropped
  std::vector<uint8_t> req_mem_;
  void* req_desc_ = nullptr;
  std::vector<OpContext> req_ctx_;
  // Requests of ours the provider could not take yet, oldest first.
  struct PendingRequest {
    fi_addr_t owner;
    TaggedReadRequest req;
    OpContext* ctx;  // the part's receive, cancelled if the request cannot go
  };
  std::vector<PendingRequest> pending_requests_;
  bool send_read_request(const PendingRequest& p);
  // A read no answer reached in this long is cancelled and fails (the
  // owner died or never answers); the engine then retries the transfer.
  static constexpr uint64_t kTaggedReadTimeoutNs = 5'000'000'000;
  uint64_t tagged_read_timeout_ns_ = kTaggedReadTimeoutNs;
  size_t tagged_reads_posted_ = 0;
  uint32_t polls_since_expiry_check_ = 0;
  TaggedReadStats tagged_stats_;
  // One address-vector entry per remote endpoint name: sessions to the
  // same peer share it, so the source libfabric reports matches them all.
  // Counted: removed from the address vector when the last session to
  // the peer releases it.
  struct AvEntry {
    fi_addr_t addr;
    size_t refs;
  };
  std::map<std::string, AvEntry> av_entries_;
  void drop_pending_to(fi_addr_t dest);
};

}  // namespace rpc::detail
