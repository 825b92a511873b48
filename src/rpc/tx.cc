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

uint8_t* RpcImpl::ctrl_hdr_slot() {
  // One header buffer per batch entry: a slot is reused only after the
  // batch that used it was flushed.
  if (ctrl_hdr_next_ == kTxBatch) tx_flush();
  return ctrl_hdrs_[ctrl_hdr_next_++].data();
}

void RpcImpl::tx_ctrl(Session& session, const PktHdr& hdr) {
  uint8_t* slot = ctrl_hdr_slot();
  hdr.store(slot);
  tx_enqueue(slot, nullptr, 0, 0, 0, session);
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
