// Congestion control on the client's sending path (RpcConfig::
// congestion_control): Timely sets each session's rate from its RTT
// samples (credits.cc feeds them); a session below the full rate sends a
// packet only when the previous one's time at that rate has passed, and
// until then its slot waits in the timing wheel. An uncongested session
// skips all of it: one comparison per packet (eRPC's wheel bypass).
#include "rpc/rpc_impl.h"

namespace rpc::detail {

namespace {

// A wheel entry names a slot without pointing at it: the session number,
// the slot's index and 45 bits of the session's connect token, so that an
// entry outliving its session (ended, its number reused) is recognised and
// dropped.
constexpr uint64_t kTokenBits = 45;
constexpr uint64_t kTokenMask = (uint64_t{1} << kTokenBits) - 1;

uint64_t wheel_entry(const Session& session, size_t slot_index) {
  return uint64_t{session.local_num} << 48 | uint64_t{slot_index} << kTokenBits |
         (session.sm_token & kTokenMask);
}

}  // namespace

bool RpcImpl::pace(ClientSlot& slot) {
  Session& session = *slot.session;
  if (now_ns_ < session.next_tx_ns) {
    if (!slot.in_wheel) {
      slot.in_wheel = true;
      const size_t index = static_cast<size_t>(&slot - session.cslots.data());
      wheel_->insert(wheel_entry(session, index), session.next_tx_ns, now_ns_);
      session.stats.cc_paced_pkts++;  // a packet held back (once, however often asked)
    }
    return false;
  }
  // Every packet is paced as a full one: a request for response packets
  // (RFR) pulls a full packet back.
  session.next_tx_ns =
      std::max(session.next_tx_ns, now_ns_) + session.timely.ns_for(caps_.max_pkt_bytes);
  return true;
}

void RpcImpl::poll_wheel() {
  wheel_due_.clear();
  if (wheel_->reap(now_ns_, wheel_due_) == 0) return;
  for (const uint64_t entry : wheel_due_) {
    const auto sn = static_cast<SessionNum>(entry >> 48);
    Session* s = sn < sessions_.size() ? sessions_[sn].get() : nullptr;
    if (s == nullptr || !s->is_client() || (s->sm_token & kTokenMask) != (entry & kTokenMask)) {
      continue;  // the session ended
    }
    ClientSlot& slot = s->cslots[(entry >> kTokenBits) & (kSessionReqWindow - 1)];
    slot.in_wheel = false;
    if (slot.active && s->is_connected()) client_try_send(slot);
  }
}

}  // namespace rpc::detail
