// Congestion control on the client's sending path (RpcConfig::
// congestion_control): Timely sets each session's rate from its RTT
// samples (credits.cc feeds them); a session below the full rate sends a
// packet only when the previous one's time at that rate has passed. Until
// then its slots wait in the session's pacing queue, in the order they
// asked, and the session in the timing wheel. An uncongested session skips
// all of it: one comparison per packet (eRPC's wheel bypass).
//
// The queue takes turns, one packet per slot per turn. Before it, each slot
// waited in the wheel on its own, and a slot whose answers kept arriving
// sent from the receive path whenever the rate allowed, ahead of slots the
// wheel was about to wake: those found the session's time used up and went
// back, again and again. At 64 credits, three of eight 128 KB requests at
// 30 % loss waited 30 s for a turn that never came, until their request
// timeout reset the session.
#include "rpc/rpc_impl.h"

namespace rpc::detail {

namespace {

// A wheel entry names a slot without pointing at it: the session number,
// the slot's index and 45 bits of the session's connect token, so that an
// entry outliving its session (ended, its number reused) is recognised and
// dropped.
constexpr uint64_t kTokenBits = 45;
constexpr uint64_t kTokenMask = (uint64_t{1} << kTokenBits) - 1;

uint64_t wheel_entry(const Session& session) {
  return uint64_t{session.local_num} << 48 | (session.sm_token & kTokenMask);
}

}  // namespace

// Puts the slot at the back of its session's pacing queue (unless it is in
// it already), and the session in the wheel for when its time comes.
void RpcImpl::wait_for_pace(ClientSlot& slot) {
  Session& session = *slot.session;
  if (!slot.paced) {
    slot.paced = true;
    const size_t tail = (session.paced_head + session.paced_count) % kSessionReqWindow;
    session.paced_queue[tail] = static_cast<uint8_t>(slot.req_num % kSessionReqWindow);
    session.paced_count++;
    session.stats.cc_paced_pkts++;  // a packet held back (once, however often asked)
  }
  schedule_pacing(session);
}

// The session in the wheel for when its next packet may leave (once).
void RpcImpl::schedule_pacing(Session& session) {
  if (session.in_wheel) return;
  session.in_wheel = true;
  wheel_->insert(wheel_entry(session), session.next_tx_ns, now_ns_);
}

bool RpcImpl::pace(ClientSlot& slot) {
  Session& session = *slot.session;
  // Behind the slots that asked first, unless this is its turn.
  const bool others_wait = session.paced_count > (slot.paced ? 1 : 0);
  if (now_ns_ < session.next_tx_ns || (others_wait && !slot.pace_turn)) {
    wait_for_pace(slot);
    return false;
  }
  slot.pace_turn = false;  // one packet per turn
  // Every packet is paced as a full one: a request for response packets
  // (RFR) pulls a full packet back.
  session.next_tx_ns =
      std::max(session.next_tx_ns, now_ns_) + session.timely.ns_for(caps_.max_pkt_bytes);
  return true;
}

// A session's time has come: its waiting slots take turns, one packet
// each, for as long as the rate allows. A slot that still has packets to
// send after its turn goes to the back (pace); one without credits now
// waits for them instead (the stall queue), one with nothing left drops
// out.
void RpcImpl::poll_wheel() {
  wheel_due_.clear();
  if (wheel_->reap(now_ns_, wheel_due_) == 0) return;
  for (const uint64_t entry : wheel_due_) {
    const auto sn = static_cast<SessionNum>(entry >> 48);
    Session* s = sn < sessions_.size() ? sessions_[sn].get() : nullptr;
    if (s == nullptr || !s->is_client() || (s->sm_token & kTokenMask) != (entry & kTokenMask)) {
      continue;  // the session ended
    }
    s->in_wheel = false;
    // Each turn sends a packet (moving next_tx_ns on) or takes a slot off
    // the queue, so this ends.
    while (s->paced_count > 0 && now_ns_ >= s->next_tx_ns && s->is_connected()) {
      ClientSlot& slot = s->cslots[s->paced_queue[s->paced_head]];
      s->paced_head = static_cast<uint8_t>((s->paced_head + 1) % kSessionReqWindow);
      s->paced_count--;
      slot.paced = false;
      if (!slot.active) continue;
      slot.pace_turn = true;
      client_try_send(slot);
      slot.pace_turn = false;
    }
    if (s->paced_count > 0 && s->is_connected()) schedule_pacing(*s);
  }
}

}  // namespace rpc::detail
