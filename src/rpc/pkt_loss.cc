// Loss recovery: a client slot that made no progress for an RTO rolls back
// to its last acknowledged packet and resends from there (go-back-N). The
// server answers duplicates from its cache, so handlers run at most once.
#include "rpc/rpc_impl.h"

namespace rpc::detail {

void RpcImpl::scan_for_loss() {
  last_loss_scan_ns_ = now_ns_;
  for (auto& s : sessions_) {
    if (s == nullptr || !s->is_client() || !s->is_connected()) continue;
    for (ClientSlot& slot : s->cslots) {
      // Nothing in flight (waiting for credits or a bulk read) is not loss.
      if (!slot.active || slot.bulk_resp_reading || slot.num_tx == slot.num_rx) continue;
      if (now_ns_ - slot.progress_ns >= rto_ns_) rollback(slot);
    }
  }
}

void RpcImpl::rollback(ClientSlot& slot) {
  Session& session = *slot.session;
  session.credits += slot.num_tx - slot.num_rx;
  slot.num_tx = slot.num_rx;
  slot.progress_ns = now_ns_;
  session.stats.retransmissions++;
  stats_.retransmissions++;
  client_try_send(slot);
}

}  // namespace rpc::detail
