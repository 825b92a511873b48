// Credits: how many packets a session may have in flight. The RX ring room
// a session reserves and the credits it is granted at connect; the client's
// acceptance of answers (each returns one credit); explicit credit returns,
// sent cumulatively by the server and processed by the client.
#include <algorithm>

#include "common/clock.h"
#include "rpc/rpc_impl.h"

namespace rpc::detail {

// Sessions and ring room (docs/design.md, "Sessions and ring room"). A
// session's credits are backed by RX ring entries while the ring has room,
// so that none of its packets can be dropped at the receiver (eRPC's rule).
// Past that, a new session gets the room that is left, and once none is
// left kMinSessionCredits that no entry backs: the ring is overcommitted.
// If more of those sessions send at once than the ring holds, the
// transport drops what does not fit (RpcStats::drops.rx_ring_full) and the
// clients retransmit; every session keeps at least one credit, so none
// stalls.
Admission RpcImpl::admit(size_t wanted) const {
  const size_t room = caps_.rx_ring_size - std::min(ring_reserved_, caps_.rx_ring_size);
  const size_t credits = std::min(wanted, std::max(room, kMinSessionCredits));
  return Admission{credits, std::min(credits, room)};
}

void RpcImpl::set_session_credits(Session& session, Admission a) {
  ring_reserved_ -= session.ring_entries;
  ring_overcommit_ -= session.max_credits - session.ring_entries;
  session.max_credits = a.credits;
  session.credits = a.credits;
  session.ring_entries = a.ring_entries;
  ring_reserved_ += a.ring_entries;
  ring_overcommit_ += a.credits - a.ring_entries;
}

// What a server grants a client that asks for `asked` credits: never more
// than its own setting, never below kMinSessionCredits (a forged ask of 0
// would otherwise stall the session; an overcommitted client asks for
// exactly that many).
size_t RpcImpl::credits_to_grant(size_t asked) const {
  return std::min(std::max(asked, kMinSessionCredits), config_.session_credits);
}

// Go-back-N: only the next expected packet is accepted. Each accepted
// packet answers one sent packet and returns its credit.
bool RpcImpl::client_accept(ClientSlot& slot, size_t rx_index) {
  if (rx_index < slot.num_rx) {
    // A second answer to a packet: the server got it twice, so a
    // retransmission of it was not needed (or the network duplicated it).
    stats_.drops.stale++;
    stats_.spurious_retransmissions++;
    slot.session->stats.spurious_retransmissions++;
    if (slot.undo_cut != 0) [[unlikely]]
      check_spurious_timeout(slot, slot.req_num, rx_index);
    return false;
  }
  if (slot.bulk_read != kNoBulkRead) {
    stats_.drops.stale++;
    return false;
  }
  if (rx_index > slot.num_rx || rx_index >= slot.num_tx) {
    if (rx_index == slot.num_rx && rx_index < slot.rolled_back_tx) [[unlikely]]
      return client_accept_late(slot, rx_index);
    stats_.drops.out_of_order++;
    return false;
  }
  slot.num_rx++;
  Session& session = *slot.session;
  session.credits++;
  if (rx_index == slot.rtt_sample_index) {
    const uint64_t sample_ns = now_ns_ - slot.rtt_sample_sent_ns;
    session.rtt.add_sample(sample_ns);
    if (wheel_ != nullptr) {
      // The answer to a bulk request's control packet (answer 0, its only
      // request packet) comes after the server has read the whole message:
      // the sample measures that transfer (8 MiB is milliseconds at any
      // rate), not a queue, and Timely took it as congestion and paced the
      // session's datagrams to ~120 Mbit/s. The RTO still learns from it
      // (the next control packet's answer takes as long); the reads
      // themselves are never paced. Its RFRs' answers are sampled as any.
      const uint64_t timely_ns = slot.bulk_req && rx_index == 0 ? 0 : timely_sample_ns(sample_ns);
      if (timely_ns != 0) session.timely.on_rtt_sample(now_ns_, timely_ns);
      end_initial_window(session);
    }
    slot.rtt_sample_index = kNoSample;  // (srtt_us, rto_us: computed in session_stats())
  }
  note_progress(slot);
  return true;
}

// An accepted answer: the slot's RTO backoff ends, and the request's
// timeout counts from here if it got further than ever before.
void RpcImpl::note_progress(ClientSlot& slot) {
  slot.rto_backoff = 0;
  slot.progress_ns = now_ns_;
  if (slot.num_rx > slot.rx_high) {  // new ground (not again after a restart)
    slot.rx_high = slot.num_rx;
    slot.rx_progress_ns = now_ns_;
  }
}

// The next answer, to a packet that a rollback took back and that has not
// been sent again (the rollback's resend waits for pacing, or for credits):
// it answers the first copy, the only one, which the server took in order.
// So it is progress, taken as if the packet had been resent and answered
// (with no credit: the rollback gave that back), and it proves the timeout
// spurious for this slot (Eifel's test: the first answer after a timeout
// is to the original). Dropping it, as go-back-N did, threw the progress
// away and sent the packet again.
bool RpcImpl::client_accept_late(ClientSlot& slot, size_t rx_index) {
  slot.num_rx++;
  slot.num_tx = slot.num_rx;
  note_progress(slot);
  stats_.late_answers_accepted++;
  if (slot.undo_cut != 0) check_spurious_timeout(slot, slot.req_num, rx_index);
  return true;
}

void RpcImpl::client_process_cr(Session& session, const PktHdr& hdr) {
  ClientSlot* slot = client_slot_for(session, hdr.req_num());
  if (slot == nullptr) {
    check_stale_answer(session, hdr);
    return;
  }
  if (hdr.restart()) {
    client_restart_request(*slot);
    return;
  }
  if (size_t{hdr.pkt_num()} + 1 >= slot->req_pkts) {  // only non-final request packets get one
    stats_.drops.bad_header++;
    return;
  }
  // Cumulative: it answers every request packet up to pkt_num (the server
  // folds the returns of a burst into one). Nothing is taken from one that
  // names a packet not yet sent.
  const size_t last = hdr.pkt_num();
  if (last >= std::max(slot->num_tx, slot->rolled_back_tx)) {
    stats_.drops.out_of_order++;
    return;
  }
  if (last < slot->num_rx) {
    (void)client_accept(*slot, last);  // a second answer: counted there
    return;
  }
  while (slot->num_rx <= last) {
    if (!client_accept(*slot, slot->num_rx)) return;
  }
  client_try_send(*slot);
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
  tx_enqueue(slot, nullptr, 0, 0, 0, session);
  // Only while it waits in the batch (not dropped by fault injection, not
  // flushed by a full batch) can it be overwritten.
  const bool waiting = tx_batch_size_ == queued + 1;
  last_cr_hdr_ = waiting ? slot : nullptr;
  last_cr_session_ = waiting ? &session : nullptr;
}

// The server dropped the part it held of a request (abandon_partial_request)
// and asks for it again from packet 0. The batch's waiting credit return is
// not overwritten past it (the client would read the notice first).
void RpcImpl::tx_restart_notice(Session& session, ReqType req_type, uint64_t req_num) {
  tx_ctrl(session, PktHdr::make_restart(req_type, session.remote_num, req_num));
  last_cr_hdr_ = nullptr;
  last_cr_session_ = nullptr;
}

}  // namespace rpc::detail
