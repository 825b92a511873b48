// TX batching (one transport call per burst) and TX fault injection.
#include "rpc/rpc_impl.h"

namespace rpc::detail {

bool RpcImpl::inject_drop() {
  // xorshift64*: cheap, and deterministic per Rpc for a given seed.
  rng_state_ ^= rng_state_ >> 12;
  rng_state_ ^= rng_state_ << 25;
  rng_state_ ^= rng_state_ >> 27;
  return drop_threshold_ == UINT64_MAX || rng_state_ * 2685821657736338717ull < drop_threshold_;
}

void RpcImpl::tx_enqueue(const uint8_t* hdr, const uint8_t* data, uint32_t data_len, uint32_t lkey,
                         Session& session) {
  session.stats.tx_pkts++;
  stats_.tx_pkts++;
  if (drop_enabled_ && inject_drop()) {
    stats_.tx_dropped_injected++;
    return;
  }
  tx_batch_[tx_batch_size_++] = TxItem{&session.remote_route, hdr, data, data_len, lkey};
  if (tx_batch_size_ == kTxBatch) tx_flush();
}

uint8_t* RpcImpl::ctrl_hdr_slot() {
  // One header buffer per batch entry: a slot is reused only after the
  // batch that used it was flushed.
  if (ctrl_hdr_next_ == kTxBatch) tx_flush();
  return ctrl_hdrs_[ctrl_hdr_next_++].data();
}

void RpcImpl::tx_ctrl(Session& session, const PktHdr& hdr) {
  uint8_t* slot = ctrl_hdr_slot();
  hdr.store(slot);
  tx_enqueue(slot, nullptr, 0, 0, session);
}

// An explicit credit return acknowledges request packets 0..pkt_num
// (cumulative; docs/wire_format.md), so a burst of request packets is
// answered by one: a later return for the same request overwrites the one
// still waiting in the TX batch instead of adding a packet. The server
// sent one per packet before; the client then spent about a sixth of its
// time receiving them in an 8 MiB stream.
void RpcImpl::tx_credit_return(Session& session, ReqType req_type, size_t pkt_num,
                               uint64_t req_num) {
  const PktHdr hdr = PktHdr::make(PktType::kExplCr, req_type, 0, session.remote_num,
                                  static_cast<uint16_t>(pkt_num), req_num);
  if (last_cr_hdr_ != nullptr && last_cr_session_ == &session) {
    const PktHdr waiting = PktHdr::load(last_cr_hdr_);
    if (waiting.req_num() == hdr.req_num() && waiting.pkt_num() < hdr.pkt_num()) {
      hdr.store(last_cr_hdr_);
      stats_.credit_returns_coalesced++;
      return;
    }
  }
  uint8_t* slot = ctrl_hdr_slot();
  hdr.store(slot);
  const size_t queued = tx_batch_size_;
  tx_enqueue(slot, nullptr, 0, 0, session);
  // Only while it waits in the batch (not dropped by fault injection, not
  // flushed by a full batch) can it be overwritten.
  const bool waiting = tx_batch_size_ == queued + 1;
  last_cr_hdr_ = waiting ? slot : nullptr;
  last_cr_session_ = waiting ? &session : nullptr;
}

void RpcImpl::tx_flush() {
  if (tx_batch_size_ > 0) {
    transport_->tx_burst({tx_batch_.data(), tx_batch_size_});
  }
  tx_batch_size_ = 0;
  ctrl_hdr_next_ = 0;
  last_cr_hdr_ = nullptr;
  last_cr_session_ = nullptr;
}

}  // namespace rpc::detail
