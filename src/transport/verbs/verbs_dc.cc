// The verbs transport's bulk path over mlx5 Dynamically Connected
// transport (DC): per Rpc, one DC initiator (DCI) that reads from any
// peer, and one DC target (DCT) that peers read our exposures through,
// guarded by a random access key. Unlike RC, nothing grows with the
// number of peers: this is how mlx5 NICs avoid the per-peer QPs that made
// eRPC shun RC.
//
// Routing: each side's DCT number, key and read depth travel in the
// connect messages (verbs_routing.h, bulk = kDc); a read names its target
// per work request (mlx5dv_wr_set_dc_addr). The DCI sits in rc_conns_ as
// one more connection (dc = true), so queueing, read slots and completion
// handling are verbs_rc.cc's; what differs is here: bring-up, posting, and
// recovery. An error on a read (a dead peer, a revoked key) moves the DCI
// to error, which flushes the reads to every other peer too: the peer
// whose read failed loses its sessions, the flushed reads are reported
// failed (the engine retries them), and the DCI is reset and brought up
// again once its last flushed completion is reaped.
//
// Never run on hardware by the project: Soft-RoCE is not mlx5, so CI
// exercises only the selection (auto picks RC, dc is refused with the
// reason) and the handshake fields. Compiled where infiniband/mlx5dv.h is.
#include <fmt/format.h>

#include <cerrno>
#include <cstring>

#include "common/log.h"
#include "common/random.h"
#include "rpc_build_config.h"
#include "transport/verbs/verbs_transport.h"

#if RPC_HAVE_MLX5DV
#include <infiniband/mlx5dv.h>
#endif

namespace rpc::detail {

namespace {

#if RPC_HAVE_MLX5DV
// As for RC QPs (verbs_rc.cc).
constexpr uint8_t kDcTimeout = 14;
constexpr uint8_t kDcRetries = 7;
constexpr uint8_t kDcRnrRetries = 7;
constexpr uint8_t kDcMinRnrTimer = 12;
#endif

}  // namespace

// A peer's bulk path over DC: a hash of its port and UD QP (the same
// identity RC pairs are keyed by), with the top bit set so that it never
// equals an RC path (those carry a 32-bit generation there, far below it).
uint64_t VerbsTransport::dc_path_of(const VerbsRoutingWire& w) {
  const PeerKey key = peer_key_of(w);
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
  for (const uint8_t b : key) {
    h ^= b;
    h *= 0x100000001b3ull;
  }
  return h | (uint64_t{1} << 63);
}

// A read over DC completed in error. Unless it was only flushed by an
// error on another read, the peer it went to is failed: its sessions are
// reset, as an RC pair's would be.
void VerbsTransport::fail_dc_read(ReadOp& r, bool flushed) {
  if (flushed || r.failed) return;
  for (const uint64_t p : failed_paths_) {
    if (p == r.dc_path) return;  // already reported
  }
  failed_paths_.push_back(r.dc_path);
}

#if !RPC_HAVE_MLX5DV

DcAvailability VerbsTransport::init_dc(std::string& /*error*/) { return DcAvailability::kNotBuilt; }
void VerbsTransport::cleanup_dc() noexcept {}
// Unreachable: without mlx5dv no connection is ever a DC one.
bool VerbsTransport::post_dc_read(ReadOp& /*r*/, uint32_t /*op_index*/, uint32_t /*chunk*/) {
  return false;
}
void VerbsTransport::recover_dci() {}

#else

namespace {

// INIT -> RTR -> RTS for a DCI: no destination at this point; each work
// request names its own.
bool bring_up_dci(ibv_qp* dci, uint8_t port, ibv_mtu mtu, uint8_t max_rd_atomic) {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.pkey_index = 0;
  attr.port_num = port;
  if (ibv_modify_qp(dci, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT) != 0) return false;
  attr = {};
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = mtu;
  if (ibv_modify_qp(dci, &attr, IBV_QP_STATE | IBV_QP_PATH_MTU) != 0) return false;
  attr = {};
  attr.qp_state = IBV_QPS_RTS;
  attr.timeout = kDcTimeout;
  attr.retry_cnt = kDcRetries;
  attr.rnr_retry = kDcRnrRetries;
  attr.sq_psn = 0;
  attr.max_rd_atomic = max_rd_atomic;
  return ibv_modify_qp(dci, &attr,
                       IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                           IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC) == 0;
}

}  // namespace

DcAvailability VerbsTransport::init_dc(std::string& error) {
  if (!mlx5dv_is_supported(ctx_->device)) return DcAvailability::kNotMlx5;
  auto refused = [&](const char* what) {
    error = fmt::format("{}: {}", what, std::strerror(errno));
    cleanup_dc();
    return DcAvailability::kRefused;
  };
  // The target: a DCT needs an SRQ, though reads never consume receives.
  ibv_srq_init_attr sa{};
  sa.attr.max_wr = 1;
  sa.attr.max_sge = 1;
  dc_srq_ = ibv_create_srq(pd_, &sa);
  if (dc_srq_ == nullptr) return refused("ibv_create_srq");
  dc_key_ = random_u64();
  ibv_qp_init_attr_ex qa{};
  qa.qp_type = IBV_QPT_DRIVER;
  qa.send_cq = rc_cq_;
  qa.recv_cq = rc_cq_;
  qa.srq = dc_srq_;
  qa.comp_mask = IBV_QP_INIT_ATTR_PD;
  qa.pd = pd_;
  mlx5dv_qp_init_attr dv{};
  dv.comp_mask = MLX5DV_QP_INIT_ATTR_MASK_DC;
  dv.dc_init_attr.dc_type = MLX5DV_DCTYPE_DCT;
  dv.dc_init_attr.dct_access_key = dc_key_;
  dct_ = mlx5dv_create_qp(ctx_, &qa, &dv);
  if (dct_ == nullptr) return refused("mlx5dv_create_qp (DCT)");
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.pkey_index = 0;
  attr.port_num = port_;
  attr.qp_access_flags = IBV_ACCESS_REMOTE_READ;  // never remote write
  if (ibv_modify_qp(dct_, &attr,
                    IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0) {
    return refused("moving the DCT to INIT");
  }
  attr = {};
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = path_mtu_;
  attr.min_rnr_timer = kDcMinRnrTimer;
  attr.ah_attr.port_num = port_;
  if (use_grh_) {
    attr.ah_attr.is_global = 1;
    attr.ah_attr.grh.sgid_index = static_cast<uint8_t>(gid_index_);
    attr.ah_attr.grh.hop_limit = 64;
  }
  if (ibv_modify_qp(dct_, &attr,
                    IBV_QP_STATE | IBV_QP_PATH_MTU | IBV_QP_MIN_RNR_TIMER | IBV_QP_AV) != 0) {
    return refused("moving the DCT to RTR");
  }
  // The initiator: reads only, through the extended work-request API.
  qa = {};
  qa.qp_type = IBV_QPT_DRIVER;
  qa.send_cq = rc_cq_;
  qa.recv_cq = rc_cq_;
  qa.cap.max_send_wr = local_init_rd_atomic_;
  qa.cap.max_send_sge = 1;
  qa.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  qa.send_ops_flags = IBV_QP_EX_WITH_RDMA_READ;
  qa.pd = pd_;
  dv = {};
  dv.comp_mask = MLX5DV_QP_INIT_ATTR_MASK_DC;
  dv.dc_init_attr.dc_type = MLX5DV_DCTYPE_DCI;
  ibv_qp* dci = mlx5dv_create_qp(ctx_, &qa, &dv);
  if (dci == nullptr) return refused("mlx5dv_create_qp (DCI)");
  if (!bring_up_dci(dci, port_, path_mtu_, local_init_rd_atomic_)) {
    ibv_destroy_qp(dci);
    return refused("bringing the DCI up");
  }
  dci_qpx_ = ibv_qp_to_qp_ex(dci);
  dci_mqpx_ = mlx5dv_qp_ex_from_ibv_qp_ex(dci_qpx_);
  dci_index_ = static_cast<uint32_t>(rc_conns_.size());
  RcConn& c = rc_conns_.emplace_back();
  c.qp = dci;
  c.state = RcState::kConnected;
  c.dc = true;
  c.max_rd_atomic = local_init_rd_atomic_;
  c.refs = 1;  // the transport's own: it lives as long as the transport
  return DcAvailability::kAvailable;
}

// The DCT and its SRQ; the DCI is in rc_conns_ and goes with the RC QPs.
void VerbsTransport::cleanup_dc() noexcept {
  if (dct_ != nullptr) ibv_destroy_qp(dct_);
  dct_ = nullptr;
  if (dc_srq_ != nullptr) ibv_destroy_srq(dc_srq_);
  dc_srq_ = nullptr;
}

bool VerbsTransport::post_dc_read(ReadOp& r, uint32_t op_index, uint32_t chunk) {
  ibv_wr_start(dci_qpx_);
  dci_qpx_->wr_id = op_index;
  dci_qpx_->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_rdma_read(dci_qpx_, r.rkey, r.remote_addr + r.posted_bytes);
  mlx5dv_wr_set_dc_addr(dci_mqpx_, r.dc_ah, r.dct_num, r.dc_key);
  ibv_wr_set_sge(dci_qpx_, r.lkey, reinterpret_cast<uint64_t>(r.local_addr + r.posted_bytes),
                 chunk);
  return ibv_wr_complete(dci_qpx_) == 0;
}

// ERR -> RESET -> RTS, once no flushed read is left to reap. A DCI that
// will not come back leaves DC reads refused (post_read false: the engine
// retries, and sessions time out); RC pairs are unaffected.
void VerbsTransport::recover_dci() {
  RcConn& c = rc_conns_[dci_index_];
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_RESET;
  if (ibv_modify_qp(c.qp, &attr, IBV_QP_STATE) != 0 ||
      !bring_up_dci(c.qp, port_, path_mtu_, c.max_rd_atomic)) {
    RPC_LOG_ERROR("verbs transport: the DC initiator did not come back up ({}); DC reads stop",
                  std::strerror(errno));
    return;
  }
  c.state = RcState::kConnected;
  RPC_LOG_INFO("verbs transport: the DC initiator is up again");
}

#endif

}  // namespace rpc::detail
