// The verbs transport's bulk path: RDMA READ over RC queue pairs.
//
// One RC QP per (client Rpc, server Rpc) pair, shared by every session
// between them, set up inside session connect (no extra round trip):
//  - the client's connect request offers a QP in INIT (rc.qpn, rc.psn), and
//    names the QP it already has connected to that server, if any
//    (rc.peer_qpn; the engine's peer hint says which server);
//  - the server reuses its QP for that client Rpc when it is connected to
//    one of the two, else it connects a new one to the offer (RTR, RTS);
//    it answers with its QP and the client QP that QP is connected to;
//  - the client connects its offer, or reuses its connected QP, and
//    destroys an offer nobody took.
// Sessions that connect concurrently share the one pending offer, so they
// end up on one QP too. A QP that fails (peer died, retries exhausted, a
// remote access error) is reported by poll_failed_bulk_paths; the engine
// ends its sessions, and the next connect builds a new pair.
//
// Reads longer than max_read_wr_bytes_ go as several work requests; each
// QP has max_rd_atomic read slots (what both ends allow), and reads beyond
// them wait in the QP's queue rather than fail. Every work request is
// signaled, so each one's slot is given back when it completes.
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "common/log.h"
#include "common/random.h"
#include "transport/verbs/verbs_transport.h"

namespace rpc::detail {

namespace {

// Large enough to stream at line rate with a few in flight, small enough
// that a huge message does not hold a read slot for long.
constexpr uint32_t kMaxReadWrBytes = 1u << 20;
// Work requests in flight over all RC QPs (the shared CQ's depth).
constexpr uint32_t kWantedRcCqDepth = 4096;
// Local ACK timeout 4.096 us * 2^14 = 67 ms, 7 retries: a dead peer is
// noticed within about half a second of a read to it.
constexpr uint8_t kRcTimeout = 14;
constexpr uint8_t kRcRetries = 7;
constexpr uint8_t kRcRnrRetries = 7;  // 7 = retry forever (reads never need a receive)
constexpr uint8_t kMinRnrTimer = 12;
// quiesce_bulk waits this long for the flushed completions of a QP in error.
constexpr auto kQuiesceTimeout = std::chrono::seconds(1);

uint64_t make_path(uint32_t gen, uint32_t index) { return uint64_t{gen} << 32 | (index + 1); }

}  // namespace

void VerbsTransport::init_rc(const ibv_device_attr& da, const ibv_port_attr& pa) {
  local_rd_atomic_ = static_cast<uint8_t>(std::clamp(da.max_qp_rd_atom, 1, 255));
  local_init_rd_atomic_ = static_cast<uint8_t>(std::clamp(da.max_qp_init_rd_atom, 1, 255));
  path_mtu_ = pa.active_mtu;
  max_read_wr_bytes_ = std::min<uint32_t>(pa.max_msg_sz, kMaxReadWrBytes);
  // Reads may fill rc_cq_depth_ entries; memory-window operations (one
  // at a time, plus any that timed out) get kMwCqRoom more.
  rc_cq_depth_ =
      std::max<uint32_t>(std::min<uint32_t>(kWantedRcCqDepth, static_cast<uint32_t>(da.max_cqe)) -
                             std::min<uint32_t>(kMwCqRoom, static_cast<uint32_t>(da.max_cqe) / 2),
                         1);
  rc_cq_ = ibv_create_cq(ctx_, static_cast<int>(rc_cq_depth_ + kMwCqRoom), nullptr, nullptr, 0);
  if (rc_cq_ == nullptr) {
    // No bulk path, datagrams still work: large messages go as datagrams.
    RPC_LOG_WARN("verbs transport: no CQ for RC reads ({}); large messages go as datagrams",
                 std::strerror(errno));
    return;
  }
  ready_.reserve(rc_cq_depth_);  // reads finished while a window op waited, or failed
  failed_paths_.reserve(16);
  mw_supported_ = (da.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B) != 0;
  use_mw_ = mw_supported_;
  free_mws_.reserve(1024);
}

// RC came up when rc_cq_ did; DC is probed only when the configuration
// may use it. Throws when verbs_bulk = dc cannot be honoured.
void VerbsTransport::choose_bulk(VerbsBulk wanted) {
  BulkProbe probe{device_name_, rc_cq_ != nullptr, DcAvailability::kNotProbed, {}};
  if (wants_dc_probe(wanted)) {
    if (rc_cq_ != nullptr) {
      probe.dc = init_dc(probe.dc_error);
    } else {
      probe.dc = DcAvailability::kRefused;
      probe.dc_error = "no completion queue for reads";
    }
  }
  Result<BulkChoice> choice = choose_bulk_path(wanted, probe);
  if (!choice) throw Error("verbs transport: " + choice.error(), EINVAL);
  if (choice->kind != VerbsBulkKind::kDc) cleanup_dc();
  bulk_kind_ = choice->kind;
  bulk_reason_ = choice->reason;
  caps_.bulk = bulk_kind_ != VerbsBulkKind::kNone;
  RPC_LOG_DEBUG("verbs transport: bulk path: {}", bulk_reason_);
}

void VerbsTransport::cleanup_rc() noexcept {
  cleanup_dc();  // its target completes on rc_cq_; its initiator goes below
  for (RcConn& c : rc_conns_) {
    if (c.qp != nullptr) ibv_destroy_qp(c.qp);
    c.qp = nullptr;
  }
  rc_conns_.clear();
  if (rc_cq_ != nullptr) ibv_destroy_cq(rc_cq_);
  rc_cq_ = nullptr;
}

VerbsTransport::PeerKey VerbsTransport::peer_key_of(const VerbsRoutingWire& w) {
  PeerKey key{};
  std::memcpy(key.data(), w.gid, 16);
  std::memcpy(key.data() + 16, &w.lid, 2);
  std::memcpy(key.data() + 18, &w.qpn, 4);
  return key;
}

// A new RC QP in INIT, readable by the peer it will be connected to (what
// a peer may read is still only what an exposure's rkey names). kNoRcIndex
// when the device refuses.
uint32_t VerbsTransport::create_rc_qp() {
  ibv_qp_init_attr qa{};
  qa.send_cq = rc_cq_;
  qa.recv_cq = rc_cq_;
  qa.qp_type = IBV_QPT_RC;
  qa.sq_sig_all = 1;
  // Reads, at most max_rd_atomic in flight, and one memory-window
  // operation at a time (plus room for one that timed out).
  qa.cap.max_send_wr = local_init_rd_atomic_ + 2u;
  qa.cap.max_recv_wr = 1;  // never posted; some providers refuse 0
  qa.cap.max_send_sge = 1;
  qa.cap.max_recv_sge = 1;
  ibv_qp* qp = ibv_create_qp(pd_, &qa);
  if (qp == nullptr) {
    RPC_LOG_WARN("verbs transport: ibv_create_qp (RC) failed: {}", std::strerror(errno));
    return kNoRcIndex;
  }
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.pkey_index = 0;
  attr.port_num = port_;
  // Remote read at the QP level lets exposures (MRs with remote read on
  // exactly one payload) be read; no remote write: a peer's RDMA WRITE
  // fails at the QP before any key is looked at.
  attr.qp_access_flags = IBV_ACCESS_REMOTE_READ;
  if (ibv_modify_qp(qp, &attr,
                    IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0) {
    RPC_LOG_WARN("verbs transport: moving an RC QP to INIT failed: {}", std::strerror(errno));
    ibv_destroy_qp(qp);
    return kNoRcIndex;
  }
  uint32_t index;
  if (!free_rc_.empty()) {
    index = free_rc_.back();
    free_rc_.pop_back();
  } else {
    index = static_cast<uint32_t>(rc_conns_.size());
    rc_conns_.emplace_back();
  }
  RcConn& c = rc_conns_[index];
  const uint32_t gen = c.gen + 1;
  c = RcConn{};
  c.gen = gen;
  c.qp = qp;
  c.state = RcState::kOffered;
  c.psn = static_cast<uint32_t>(random_u64()) & kMaxQpn;
  return index;
}

// INIT -> RTR -> RTS against the remote RC QP w names.
bool VerbsTransport::connect_rc(uint32_t index, const VerbsRoutingWire& w) {
  RcConn& c = rc_conns_[index];
  c.max_rd_atomic = std::min(local_init_rd_atomic_, w.rd_atomic);
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = path_mtu_;
  attr.dest_qp_num = w.rc.qpn;
  attr.rq_psn = w.rc.psn;
  attr.max_dest_rd_atomic = local_rd_atomic_;
  attr.min_rnr_timer = kMinRnrTimer;
  attr.ah_attr.port_num = port_;
  attr.ah_attr.dlid = w.lid;
  if (use_grh_) {  // RoCE: addressed by GID, with the GID index the UD QP uses
    attr.ah_attr.is_global = 1;
    std::memcpy(attr.ah_attr.grh.dgid.raw, w.gid, 16);
    attr.ah_attr.grh.sgid_index = static_cast<uint8_t>(gid_index_);
    attr.ah_attr.grh.hop_limit = 64;
  }
  if (ibv_modify_qp(c.qp, &attr,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) != 0) {
    RPC_LOG_WARN("verbs transport: moving an RC QP to RTR failed: {}", std::strerror(errno));
    return false;
  }
  attr = {};
  attr.qp_state = IBV_QPS_RTS;
  attr.timeout = kRcTimeout;
  attr.retry_cnt = kRcRetries;
  attr.rnr_retry = kRcRnrRetries;
  attr.sq_psn = c.psn;
  attr.max_rd_atomic = c.max_rd_atomic;
  if (ibv_modify_qp(c.qp, &attr,
                    IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                        IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC) != 0) {
    RPC_LOG_WARN("verbs transport: moving an RC QP to RTS failed: {}", std::strerror(errno));
    return false;
  }
  c.state = RcState::kConnected;
  c.remote_qpn = w.rc.qpn;
  c.peer = peer_key_of(w);
  return true;
}

uint32_t VerbsTransport::rc_index_by_qpn(uint32_t qpn) const {
  if (qpn == 0) return kNoRcIndex;
  for (uint32_t i = 0; i < rc_conns_.size(); i++) {  // control path: a few QPs
    if (rc_conns_[i].qp != nullptr && rc_conns_[i].qp->qp_num == qpn) return i;
  }
  return kNoRcIndex;
}

bool VerbsTransport::prepare_connect(RoutingInfo& offer, uint64_t peer_hint) {
  if (!caps_.bulk) return true;  // datagrams only: nothing to offer
  VerbsRoutingWire w = verbs_info_of(offer).wire;
  w.rd_atomic = local_rd_atomic_;
  if (bulk_kind_ == VerbsBulkKind::kDc) {  // our target, readable by any peer with its key
    w.bulk = VerbsBulkKind::kDc;
    w.dc.dct_num = dct_->qp_num;
    w.dc.set_key(dc_key_);
    offer = RoutingInfo{};
    std::memcpy(offer.bytes.data(), &w, sizeof(w));
    return true;
  }
  uint32_t peer_qpn = 0;
  if (auto it = rc_by_hint_.find(peer_hint); it != rc_by_hint_.end()) {
    peer_qpn = rc_conns_[it->second].qp->qp_num;
  }
  uint32_t index;
  if (auto it = offers_by_hint_.find(peer_hint); it != offers_by_hint_.end()) {
    index = it->second;  // a connect to that server is under way: share its offer
  } else {
    index = create_rc_qp();
    if (index == kNoRcIndex) return false;
    rc_conns_[index].client = true;
    rc_conns_[index].hint = peer_hint;
    offers_by_hint_[peer_hint] = index;
  }
  RcConn& c = rc_conns_[index];
  c.refs++;
  w.bulk = VerbsBulkKind::kRc;
  w.rc.qpn = c.qp->qp_num;
  w.rc.psn = c.psn;
  w.rc.peer_qpn = peer_qpn;
  offer = RoutingInfo{};
  std::memcpy(offer.bytes.data(), &w, sizeof(w));
  return true;
}

// Server: the QP for the client Rpc whose offer this is.
bool VerbsTransport::accept_rc_offer(const VerbsRoutingWire& offer, uint32_t& rc_index) {
  if (!caps_.bulk) return false;
  const PeerKey key = peer_key_of(offer);
  if (auto it = rc_by_peer_.find(key); it != rc_by_peer_.end()) {
    RcConn& c = rc_conns_[it->second];
    // Connected to the client's QP for us, or to the offer itself (another
    // session of a concurrent connect, or a retransmitted request).
    if (c.state == RcState::kConnected &&
        (c.remote_qpn == offer.rc.peer_qpn || c.remote_qpn == offer.rc.qpn)) {
      c.refs++;
      rc_index = it->second;
      return true;
    }
  }
  const uint32_t index = create_rc_qp();
  if (index == kNoRcIndex) return false;
  if (!connect_rc(index, offer)) {
    ibv_destroy_qp(rc_conns_[index].qp);
    rc_conns_[index] = RcConn{.gen = rc_conns_[index].gen};
    free_rc_.push_back(index);
    return false;
  }
  // It becomes the client's current QP; an older one lives on for the
  // sessions still using it.
  rc_by_peer_[key] = index;
  rc_conns_[index].refs = 1;
  rc_index = index;
  return true;
}

void VerbsTransport::fill_connect_answer(const RoutingInfo& resolved, RoutingInfo& out) const {
  fill_local_routing_info(out);
  const VerbsRoutingInfo v = verbs_info_of(resolved);
  if (v.rc_index == kNoRcIndex || v.rc_index >= rc_conns_.size()) return;  // datagrams only
  const RcConn& c = rc_conns_[v.rc_index];
  if (c.qp == nullptr) return;
  VerbsRoutingWire w = verbs_info_of(out).wire;
  w.rd_atomic = local_rd_atomic_;
  if (c.dc) {
    w.bulk = VerbsBulkKind::kDc;
    w.dc.dct_num = dct_->qp_num;
    w.dc.set_key(dc_key_);
  } else {
    w.bulk = VerbsBulkKind::kRc;
    w.rc.qpn = c.qp->qp_num;
    w.rc.psn = c.psn;
    w.rc.peer_qpn = c.remote_qpn;
  }
  std::memcpy(out.bytes.data(), &w, sizeof(w));
}

bool VerbsTransport::resolve_connect_answer(RoutingInfo& answer, const RoutingInfo& offer) {
  VerbsRoutingWire w;
  if (!parse_verbs_routing(answer, w)) return false;
  const VerbsRoutingWire mine = verbs_info_of(offer).wire;
  if (mine.bulk == VerbsBulkKind::kNone) {
    // We offered nothing: an answer that names a bulk path is not one.
    return w.bulk == VerbsBulkKind::kNone && resolve_datagram_route(w, answer);
  }
  if (mine.bulk == VerbsBulkKind::kDc) {
    if (w.bulk == VerbsBulkKind::kNone) return resolve_datagram_route(w, answer);
    if (w.bulk != VerbsBulkKind::kDc || w.rd_atomic < local_init_rd_atomic_) return false;
    VerbsRoutingInfo v{w, 0, dci_index_};
    if (!resolve_ah(w, v.ah_index)) return false;
    rc_conns_[dci_index_].refs++;
    std::memcpy(answer.bytes.data(), &v, sizeof(v));
    return true;
  }
  const uint32_t offer_index = rc_index_by_qpn(mine.rc.qpn);
  if (offer_index == kNoRcIndex) return false;
  if (w.bulk == VerbsBulkKind::kNone) {
    // The server serves no RC (bulk off, or another path): datagrams only.
    if (!resolve_datagram_route(w, answer)) return false;
    release_rc(offer_index);
    return true;
  }
  if (w.bulk != VerbsBulkKind::kRc) return false;
  const PeerKey key = peer_key_of(w);
  uint32_t index = kNoRcIndex;
  if (w.rc.peer_qpn != 0 && w.rc.peer_qpn == mine.rc.peer_qpn) {
    // The server kept the pair we already have: check it is that very pair.
    const uint32_t i = rc_index_by_qpn(mine.rc.peer_qpn);
    if (i == kNoRcIndex) return false;
    const RcConn& c = rc_conns_[i];
    if (c.state != RcState::kConnected || c.peer != key || c.remote_qpn != w.rc.qpn) return false;
    index = i;
  } else if (w.rc.peer_qpn == mine.rc.qpn) {
    RcConn& c = rc_conns_[offer_index];
    if (c.state == RcState::kOffered) {
      if (!connect_rc(offer_index, w)) return false;
      offers_by_hint_.erase(c.hint);
      rc_by_hint_[c.hint] = offer_index;
    } else if (c.state != RcState::kConnected || c.peer != key || c.remote_qpn != w.rc.qpn) {
      return false;  // a concurrent session's answer connected it to another QP
    }
    index = offer_index;
  } else {
    return false;  // the server's QP is connected to none of ours
  }
  VerbsRoutingInfo v{w, 0, index};
  if (!resolve_ah(w, v.ah_index)) return false;
  // The offer's reference becomes the route's, on whichever QP it uses.
  rc_conns_[index].refs++;
  release_rc(offer_index);
  std::memcpy(answer.bytes.data(), &v, sizeof(v));
  return true;
}

// A route with no bulk path: its address handle only.
bool VerbsTransport::resolve_datagram_route(const VerbsRoutingWire& w, RoutingInfo& answer) {
  VerbsRoutingInfo v{w, 0, kNoRcIndex};
  if (!resolve_ah(w, v.ah_index)) return false;
  std::memcpy(answer.bytes.data(), &v, sizeof(v));
  return true;
}

// Server: the bulk path for a client's offer, or kNoRcIndex (datagrams
// only) when we cannot serve it: bulk off, an offer of DC while we use RC
// (or whose target serves fewer reads at once than our initiator issues),
// or an RC QP the device refused. RC offers are served whatever our own
// path is, so DC and RC-only Rpcs still read each other over RC.
uint32_t VerbsTransport::bulk_route_for(const VerbsRoutingWire& w) {
  if (!caps_.bulk) return kNoRcIndex;
  uint32_t index = kNoRcIndex;
  switch (w.bulk) {
    case VerbsBulkKind::kNone:
      break;
    case VerbsBulkKind::kRc:
      if (!accept_rc_offer(w, index)) {
        RPC_LOG_INFO("verbs transport: no RC QP for a client; its session uses datagrams only");
        index = kNoRcIndex;
      }
      break;
    case VerbsBulkKind::kDc:
      if (bulk_kind_ == VerbsBulkKind::kDc && w.rd_atomic >= local_init_rd_atomic_) {
        index = dci_index_;
        rc_conns_[index].refs++;
      }
      break;
  }
  return index;
}

void VerbsTransport::cancel_connect(const RoutingInfo& offer) {
  const VerbsRoutingWire w = verbs_info_of(offer).wire;
  if (w.bulk != VerbsBulkKind::kRc) return;  // a DC offer holds nothing
  const uint32_t index = rc_index_by_qpn(w.rc.qpn);
  if (index != kNoRcIndex) release_rc(index);
}

// Drops one reference; a QP nothing uses, with no read in flight or
// queued, is destroyed.
void VerbsTransport::release_rc(uint32_t index) {
  RcConn& c = rc_conns_[index];
  if (c.refs > 0) c.refs--;
  if (c.refs > 0) return;
  if (c.wrs_in_flight > 0 || c.queue_head != kNoOp) {
    // No session uses the pair any more, so nobody waits for these reads
    // (the engine holds their buffers as orphans). Cancel them rather than
    // wait for a peer that may be dead: Soft-RoCE never times out a read
    // whose responder QP was destroyed. The QP goes with its last flushed
    // completion (poll_bulk).
    if (c.state != RcState::kFailed) {
      c.state = RcState::kFailed;
      stop_rc(index);
    }
    if (c.wrs_in_flight > 0) return;
  }
  unlist_rc(index, /*offer_too=*/true);
  ibv_destroy_qp(c.qp);
  c = RcConn{.gen = c.gen};
  free_rc_.push_back(index);
}

uint64_t VerbsTransport::bulk_path_of(const RoutingInfo& resolved) const {
  const VerbsRoutingInfo v = verbs_info_of(resolved);
  if (v.rc_index == kNoRcIndex || v.rc_index >= rc_conns_.size()) return 0;
  // Over DC every peer shares the initiator: the path is the peer's.
  if (rc_conns_[v.rc_index].dc) return dc_path_of(v.wire);
  return make_path(rc_conns_[v.rc_index].gen, v.rc_index);
}

ibv_qp* VerbsTransport::rc_qp_of(const RoutingInfo& resolved) const {
  const VerbsRoutingInfo v = verbs_info_of(resolved);
  return v.rc_index < rc_conns_.size() ? rc_conns_[v.rc_index].qp : nullptr;
}

bool VerbsTransport::post_read(const BulkOp& op) {
  const VerbsRoutingInfo v = verbs_info_of(*op.route);
  if (v.rc_index >= rc_conns_.size() || rc_conns_[v.rc_index].state != RcState::kConnected) {
    return false;
  }
  uint32_t op_index;
  if (!free_read_ops_.empty()) {
    op_index = free_read_ops_.back();
    free_read_ops_.pop_back();
  } else {
    op_index = static_cast<uint32_t>(read_ops_.size());  // grows to the most ever in flight
    read_ops_.emplace_back();
  }
  ReadOp& r = read_ops_[op_index];
  r = ReadOp{};
  r.cookie = op.cookie;
  r.conn = v.rc_index;
  r.local_addr = op.local_addr;
  r.lkey = op.local_lkey;
  r.remote_addr = op.remote_addr;
  r.rkey = static_cast<uint32_t>(op.remote_key);
  r.len = op.len;
  RcConn& c = rc_conns_[v.rc_index];
  if (c.dc) {
    r.dc_ah = ah_entries_[v.ah_index].ah;
    r.dct_num = v.wire.dc.dct_num;
    r.dc_key = v.wire.dc.key();
    r.dc_path = dc_path_of(v.wire);
  }
  if (c.queue_tail == kNoOp) {
    c.queue_head = op_index;
  } else {
    read_ops_[c.queue_tail].next = op_index;
  }
  c.queue_tail = op_index;
  pump_rc(v.rc_index);
  return true;
}

// Posts queued reads' work requests while the QP has read slots and the
// CQ has room.
void VerbsTransport::pump_rc(uint32_t index) {
  RcConn& c = rc_conns_[index];
  while (c.queue_head != kNoOp && c.state == RcState::kConnected &&
         c.wrs_in_flight < c.max_rd_atomic && rc_wrs_in_flight_ < rc_cq_depth_) {
    const uint32_t op_index = c.queue_head;
    ReadOp& r = read_ops_[op_index];
    const uint32_t chunk = std::min(r.len - r.posted_bytes, max_read_wr_bytes_);
    if (!post_read_wr(c, r, op_index, chunk)) {
      RPC_LOG_WARN("verbs transport: posting an RDMA READ failed ({})", std::strerror(errno));
      fail_rc(index);  // only a QP in error refuses
      return;
    }
    r.posted_bytes += chunk;
    r.wrs_outstanding++;
    c.wrs_in_flight++;
    rc_wrs_in_flight_++;
    if (r.posted_bytes == r.len) {  // fully posted: leaves the queue
      c.queue_head = r.next;
      if (c.queue_head == kNoOp) c.queue_tail = kNoOp;
      r.next = kNoOp;
    }
  }
}

// The next chunk of r, on the RC QP or, over DC, to r's target.
bool VerbsTransport::post_read_wr(RcConn& c, ReadOp& r, uint32_t op_index, uint32_t chunk) {
  if (c.dc) return post_dc_read(r, op_index, chunk);
  ibv_sge sge{reinterpret_cast<uint64_t>(r.local_addr + r.posted_bytes), chunk, r.lkey};
  ibv_send_wr wr{};
  wr.wr_id = op_index;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_READ;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = r.remote_addr + r.posted_bytes;
  wr.wr.rdma.rkey = r.rkey;
  ibv_send_wr* bad = nullptr;
  return ibv_post_send(c.qp, &wr, &bad) == 0;
}

// The QP failed: no read on it will succeed again. Reads still queued fail
// now (reported by the next poll_bulk), posted ones as their flushed
// completions arrive; the engine is told which path failed.
void VerbsTransport::fail_rc(uint32_t index) {
  RcConn& c = rc_conns_[index];
  if (c.state == RcState::kFailed) return;
  c.state = RcState::kFailed;
  if (!c.dc) {
    RPC_LOG_INFO("verbs transport: an RC QP failed; its sessions are reset");
    failed_paths_.push_back(make_path(c.gen, index));
    stop_rc(index);
    return;
  }
  // The initiator serves every peer: it is brought back up once its
  // flushed reads are reaped (recover_dci), and only the peer whose read
  // failed loses its sessions (fail_dc_read). Reads that were flushed or
  // queued fail, and the engine retries them.
  RPC_LOG_INFO("verbs transport: the DC initiator went to error; recovering it");
  stop_rc(index);
  if (c.wrs_in_flight == 0) recover_dci();
}

// Removes the QP from the maps a connect finds QPs by (and from the
// pending offers, when offer_too), where it is listed under its index.
void VerbsTransport::unlist_rc(uint32_t index, bool offer_too) {
  const RcConn& c = rc_conns_[index];
  auto erase_if_me = [index](auto& map, const auto& key) {
    auto it = map.find(key);
    if (it != map.end() && it->second == index) map.erase(it);
  };
  erase_if_me(rc_by_peer_, c.peer);
  erase_if_me(rc_by_hint_, c.hint);
  if (offer_too) erase_if_me(offers_by_hint_, c.hint);
}

// Moves a failed or abandoned QP to the error state: what is posted is
// flushed (poll_bulk reports it failed), what is queued fails now, and no
// new session may connect to it.
void VerbsTransport::stop_rc(uint32_t index) {
  RcConn& c = rc_conns_[index];
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;  // flushes what is still posted, if it is not in error yet
  ibv_modify_qp(c.qp, &attr, IBV_QP_STATE);
  unlist_rc(index, /*offer_too=*/false);
  while (c.queue_head != kNoOp) {
    const uint32_t op_index = c.queue_head;
    ReadOp& r = read_ops_[op_index];
    c.queue_head = r.next;
    r.next = kNoOp;
    r.failed = true;
    r.posted_bytes = r.len;  // nothing more will be posted
    if (r.wrs_outstanding == 0) {
      ready_.push_back(BulkCompletion{r.cookie, false});
      free_read_ops_.push_back(op_index);
    }
  }
  c.queue_tail = kNoOp;
}

size_t VerbsTransport::poll_bulk(std::span<BulkCompletion> out) {
  size_t n = 0;
  while (!ready_.empty() && n < out.size()) {
    out[n++] = ready_.back();
    ready_.pop_back();
  }
  if (rc_cq_ == nullptr || (rc_wrs_in_flight_ == 0 && stray_mw_ops_ == 0) || n == out.size()) {
    return n;
  }
  // Each completion finishes at most one read: never more than out has room for.
  const int want = static_cast<int>(std::min(out.size() - n, kMaxBatch));
  const int got = ibv_poll_cq(rc_cq_, want, rc_wcs_.data());
  for (int i = 0; i < got; i++) {
    const ibv_wc& wc = rc_wcs_[static_cast<size_t>(i)];
    if ((wc.wr_id & kMwOpTag) != 0) {
      if (stray_mw_ops_ > 0) stray_mw_ops_--;  // a bind or invalidation that timed out
      continue;
    }
    on_read_completion(wc, out, &n);
  }
  return n;
}

// A work request of a read completed. When it was the read's last, the
// read is reported: into out[*n] when there is room, else through ready_.
void VerbsTransport::on_read_completion(const ibv_wc& wc, std::span<BulkCompletion> out,
                                        size_t* n) {
  const auto op_index = static_cast<uint32_t>(wc.wr_id);
  ReadOp& r = read_ops_[op_index];
  const uint32_t conn = r.conn;
  RcConn& c = rc_conns_[conn];
  c.wrs_in_flight--;
  rc_wrs_in_flight_--;
  r.wrs_outstanding--;
  if (wc.status != IBV_WC_SUCCESS) {
    if (!r.failed && wc.status != IBV_WC_WR_FLUSH_ERR) {
      RPC_LOG_INFO("verbs transport: RDMA READ failed: {}", ibv_wc_status_str(wc.status));
    }
    if (c.dc) fail_dc_read(r, wc.status == IBV_WC_WR_FLUSH_ERR);
    r.failed = true;
    fail_rc(conn);
  }
  if (r.wrs_outstanding == 0 && r.posted_bytes == r.len) {
    const BulkCompletion done{r.cookie, !r.failed};
    if (n != nullptr && *n < out.size()) {
      out[(*n)++] = done;
    } else {
      ready_.push_back(done);  // reserved for every read in flight: no allocation
    }
    free_read_ops_.push_back(op_index);
  }
  if (c.dc && c.state == RcState::kFailed && c.wrs_in_flight == 0) recover_dci();
  if (c.state == RcState::kConnected) pump_rc(conn);
  // A QP whose sessions ended while its reads were in flight goes with
  // its last completion (never the DC initiator: the transport holds it).
  if (c.refs == 0 && c.wrs_in_flight == 0 && c.queue_head == kNoOp) {
    c.refs = 1;
    release_rc(conn);
  }
}

size_t VerbsTransport::poll_failed_bulk_paths(std::span<uint64_t> out) {
  size_t n = 0;
  while (!failed_paths_.empty() && n < out.size()) {
    out[n++] = failed_paths_.back();
    failed_paths_.pop_back();
  }
  return n;
}

void VerbsTransport::quiesce_bulk() {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  for (RcConn& c : rc_conns_) {
    if (c.qp != nullptr) ibv_modify_qp(c.qp, &attr, IBV_QP_STATE);
    if (c.state == RcState::kConnected) c.state = RcState::kFailed;
    c.queue_head = c.queue_tail = kNoOp;
  }
  // A QP in error flushes every posted work request: reap them so that no
  // completion (and no DMA) is left behind.
  const auto deadline = std::chrono::steady_clock::now() + kQuiesceTimeout;
  while (rc_wrs_in_flight_ > 0 && std::chrono::steady_clock::now() < deadline) {
    const int got = ibv_poll_cq(rc_cq_, static_cast<int>(kMaxBatch), rc_wcs_.data());
    for (int i = 0; i < got; i++) {
      const uint64_t wr_id = rc_wcs_[static_cast<size_t>(i)].wr_id;
      if ((wr_id & kMwOpTag) != 0) continue;  // a bind or invalidation that timed out
      ReadOp& r = read_ops_[static_cast<uint32_t>(wr_id)];
      rc_conns_[r.conn].wrs_in_flight--;
      rc_wrs_in_flight_--;
    }
  }
  if (rc_wrs_in_flight_ > 0) {
    RPC_LOG_ERROR("verbs transport: {} RDMA READs not flushed after moving their QPs to error",
                  rc_wrs_in_flight_);
  }
  read_ops_.clear();
  free_read_ops_.clear();
  ready_.clear();
}

}  // namespace rpc::detail
