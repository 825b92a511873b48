// The verbs transport's memory: local registrations, and exposures of one
// payload to one peer for one RDMA READ.
//
// An exposure is a type-2B memory window bound over the payload on the RC
// QP of the pair that will read it (IBV_WR_BIND_MW), invalidated on revoke
// (IBV_WR_LOCAL_INV). A type-2B window is usable through the QP it was
// bound on and no other, so a peer that learns or guesses the key of a
// payload exposed to another peer still cannot read it; registrations'
// keys are the device's (an index and an 8-bit variant) and give no such
// guarantee. Binding is also cheaper than registering the payload (pages
// are pinned once, with the chunk): bench/expose_cost/mw_cost measured
// both on Soft-RoCE. Devices without type-2B windows fall back to a
// registration per payload (REMOTE_READ, deregistered on revoke), and so
// do exposures to a peer reading over DC (a window cannot be bound to a DC
// target); there, only peers holding our DC access key reach the target
// at all.
//
// Both work requests are waited for: the control packet naming the window
// travels on the UD QP, which is not ordered with the RC QP's send queue,
// so the window must be bound before it is named; and a revoke must not
// return while the peer can still read. Completions of reads met while
// waiting are handled as poll_bulk would and reported by its next call.
#include <fmt/format.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "common/log.h"
#include "transport/verbs/verbs_transport.h"

namespace rpc::detail {

namespace {

// How long a bind or an invalidation may take before the QP is declared
// failed (a device that does not complete a posted work request is broken).
constexpr auto kMwOpTimeout = std::chrono::seconds(2);

}  // namespace

Result<MemReg> VerbsTransport::register_memory(void* addr, size_t len) {
  // Local access only: sends from it, receives and reads into it. Peers
  // read what expose_for_read grants, nothing else. MW_BIND lets windows
  // be bound over it; it gives peers nothing by itself.
  const int access = IBV_ACCESS_LOCAL_WRITE | (mw_supported_ ? IBV_ACCESS_MW_BIND : 0);
  ibv_mr* mr = ibv_reg_mr(pd_, addr, len, access);
  if (mr == nullptr) {
    return Failure{fmt::format("verbs transport: ibv_reg_mr of {} bytes failed: {}", len,
                               std::strerror(errno))};
  }
  return MemReg{mr->lkey, mr};
}

void VerbsTransport::deregister_memory(const MemReg& reg) {
  if (reg.desc != nullptr) ibv_dereg_mr(static_cast<ibv_mr*>(reg.desc));
}

bool VerbsTransport::expose_for_read(const RoutingInfo& reader, const void* addr, size_t len,
                                     const MemReg& reg, Exposure& out) {
  if (!caps_.bulk) return false;
  const VerbsRoutingInfo v = verbs_info_of(reader);
  // Only the pair's RC QP can read: without a working one, nobody can.
  if (v.wire.magic != kVerbsRoutingMagic || v.rc_index >= rc_conns_.size() ||
      rc_conns_[v.rc_index].state != RcState::kConnected) {
    return false;
  }
  // A window binds to one QP; a DC peer reads through our DC target,
  // which has no send queue to bind on: over DC, a registration.
  if (use_mw_ && stray_mw_ops_ < kMwCqRoom && !rc_conns_[v.rc_index].dc) {
    return expose_by_window(v.rc_index, addr, len, reg, out);
  }
  ibv_mr* mr = ibv_reg_mr(pd_, const_cast<void*>(addr), len, IBV_ACCESS_REMOTE_READ);
  if (mr == nullptr) {
    RPC_LOG_DEBUG("verbs transport: exposing {} bytes failed: {}", len, std::strerror(errno));
    return false;
  }
  out =
      Exposure{reinterpret_cast<uint64_t>(addr), mr->rkey, exposures_.add(ExposureEntry{.mr = mr})};
  return true;
}

bool VerbsTransport::expose_by_window(uint32_t conn, const void* addr, size_t len,
                                      const MemReg& reg, Exposure& out) {
  auto* chunk = static_cast<ibv_mr*>(reg.desc);
  const auto* first = static_cast<const uint8_t*>(addr);
  const auto* chunk_first = static_cast<const uint8_t*>(chunk == nullptr ? nullptr : chunk->addr);
  // A bind outside its memory region would fail and take the QP down.
  if (chunk == nullptr || first < chunk_first || len > chunk->length ||
      static_cast<size_t>(first - chunk_first) > chunk->length - len) {
    return false;
  }
  ibv_mw* mw;
  if (!free_mws_.empty()) {
    mw = free_mws_.back();
    free_mws_.pop_back();
  } else {
    mw = ibv_alloc_mw(pd_, IBV_MW_TYPE_2);  // grows to the most exposures alive at once
    if (mw == nullptr) {
      RPC_LOG_DEBUG("verbs transport: ibv_alloc_mw failed: {}", std::strerror(errno));
      return false;
    }
  }
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_BIND_MW;
  wr.bind_mw.mw = mw;
  wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
  wr.bind_mw.bind_info.mr = chunk;
  wr.bind_mw.bind_info.addr = reinterpret_cast<uint64_t>(addr);
  wr.bind_mw.bind_info.length = len;
  wr.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_READ;
  if (!run_mw_op(conn, wr)) {
    ibv_dealloc_mw(mw);  // in an unknown state
    return false;
  }
  mw->rkey = wr.bind_mw.rkey;
  const ExposureEntry entry{.mw = mw, .conn = conn, .conn_gen = rc_conns_[conn].gen};
  out = Exposure{reinterpret_cast<uint64_t>(addr), mw->rkey, exposures_.add(entry)};
  return true;
}

void VerbsTransport::revoke_exposure(Exposure& exposure) {
  if (!exposure.active()) return;
  const ExposureEntry e = exposures_.take(exposure.handle);
  exposure = Exposure{};
  if (e.mr != nullptr) {
    ibv_dereg_mr(e.mr);
    return;
  }
  if (e.mw == nullptr) return;
  bool invalidated = false;
  if (e.conn < rc_conns_.size() && rc_conns_[e.conn].gen == e.conn_gen &&
      rc_conns_[e.conn].state == RcState::kConnected) {
    ibv_send_wr wr{};
    wr.opcode = IBV_WR_LOCAL_INV;
    wr.invalidate_rkey = e.mw->rkey;
    invalidated = run_mw_op(e.conn, wr);
  }
  if (invalidated) {
    free_mws_.push_back(e.mw);  // reserved: no allocation
  } else {
    // The QP failed or is gone: no peer can use the window any more, but
    // its state is unknown; a new one replaces it.
    ibv_dealloc_mw(e.mw);
  }
}

bool VerbsTransport::run_mw_op(uint32_t conn, ibv_send_wr& wr) {
  const uint64_t my_id = kMwOpTag | ++mw_op_seq_;
  wr.wr_id = my_id;
  wr.send_flags = IBV_SEND_SIGNALED;
  ibv_send_wr* bad = nullptr;
  if (ibv_post_send(rc_conns_[conn].qp, &wr, &bad) != 0) {
    RPC_LOG_WARN("verbs transport: posting a memory-window operation failed ({})",
                 std::strerror(errno));
    return false;
  }
  const auto deadline = std::chrono::steady_clock::now() + kMwOpTimeout;
  for (;;) {
    const int got = ibv_poll_cq(rc_cq_, static_cast<int>(kMaxBatch), rc_wcs_.data());
    bool done = false;
    bool ok = false;
    for (int i = 0; i < got; i++) {
      const ibv_wc& wc = rc_wcs_[static_cast<size_t>(i)];
      if ((wc.wr_id & kMwOpTag) == 0) {
        on_read_completion(wc, {}, nullptr);
      } else if (wc.wr_id == my_id) {
        done = true;
        ok = wc.status == IBV_WC_SUCCESS;
        if (!ok) {
          RPC_LOG_INFO("verbs transport: a memory-window operation failed: {}",
                       ibv_wc_status_str(wc.status));
        }
      } else {
        stray_mw_ops_--;  // one that timed out earlier
      }
    }
    if (done) return ok;
    if (got == 0 && std::chrono::steady_clock::now() > deadline) {
      RPC_LOG_ERROR("verbs transport: a memory-window operation did not complete in {} s",
                    std::chrono::duration_cast<std::chrono::seconds>(kMwOpTimeout).count());
      stray_mw_ops_++;
      fail_rc(conn);
      return false;
    }
  }
}

void VerbsTransport::cleanup_exposures() noexcept {
  exposures_.drain([](const ExposureEntry& e) {
    if (e.mr != nullptr) ibv_dereg_mr(e.mr);
    if (e.mw != nullptr) ibv_dealloc_mw(e.mw);
  });
  for (ibv_mw* mw : free_mws_) ibv_dealloc_mw(mw);
  free_mws_.clear();
}

}  // namespace rpc::detail
