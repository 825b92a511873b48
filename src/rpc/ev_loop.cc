// The event loop: one call per phase. Reads like a table of contents.
#include "common/clock.h"
#include "rpc/rpc_impl.h"

namespace rpc::detail {

// Not re-entrant: a continuation, handler or session callback that ran the
// loop again would have it iterate the very queues and RX burst the outer
// call is walking. Refused loudly instead (in every build).
void RpcImpl::run_event_loop_once() noexcept {
  RPC_CHECK_USAGE(!in_loop_or_callback(),
                  "Rpc {}: the event loop was run from inside itself (a continuation, handler or "
                  "session callback); it is not re-entrant",
                  config_.rpc_id);
  RPC_CHECK_OWNER("run_event_loop");
  in_event_loop_ = true;
  flushed_outside_loop_ = false;
  const uint64_t prev_loop_ns = now_ns_;
  now_ns_ = read_clock();
  loop_gap_ns_ = now_ns_ - loop_start_ns_;
  loop_start_ns_ = now_ns_;
  if (sm_mailbox_.pending()) poll_sm_queue();
  // Requests, responses, credit returns, RFRs.
  const bool rx_backlogged = process_rx() == kRxBatch;
  if (!stall_queue_.empty()) process_stall_queue();  // slots that were out of credits
  if (bg_mailbox_.pending()) poll_bg_responses();
  if (caps_.bulk) poll_bulk();  // finished one-sided reads
  // No loss scan while packets may still wait in the RX queue, or right
  // after the app kept the loop away: the answers may be queued, not lost.
  const bool loop_was_away = now_ns_ - prev_loop_ns >= rto_ns_ / 2;
  if (!rx_backlogged && !loop_was_away && now_ns_ - last_loss_scan_ns_ >= rto_ns_ / 2) {
    scan_for_loss();
  }
  if (wheel_ != nullptr && wheel_->size() != 0) poll_wheel();  // paced sessions
  tx_flush();
  in_event_loop_ = false;
}

void RpcImpl::run_event_loop(std::chrono::microseconds duration) noexcept {
  const uint64_t end_ns = read_clock() + static_cast<uint64_t>(duration.count()) * 1000;
  do {
    run_event_loop_once();
  } while (now_ns_ < end_ns);
}

// Requests from the network are capped (a peer retransmits what is dropped;
// a flood from one socket must not grow a server that is not polling).
// Responses and timeouts are never dropped: each answers a request of ours,
// so they are bounded by what we asked, and losing one would strand a
// session in kConnecting or kDisconnecting.
void RpcImpl::sm_deliver(const SmMsg& msg, const NetAddr& from) {
  if (!sm_mailbox_.post(SmDelivery{msg, from}, msg.is_request(), kMaxQueuedSmRequests)) {
    sm_requests_dropped_.fetch_add(1, std::memory_order_relaxed);
  }
}

void RpcImpl::remote_failed(const NetAddr& remote, uint64_t incarnation) {
  SmMsg msg;
  msg.incarnation = incarnation;
  sm_mailbox_.post(SmDelivery{msg, remote, true});
}

void RpcImpl::poll_sm_queue() {
  sm_mailbox_.take_all(sm_local_);
  for (const SmDelivery& d : sm_local_) handle_sm(d);
}

}  // namespace rpc::detail
