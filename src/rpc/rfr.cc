// Requests for response (RFR): the client asks for response packets 1..n-1
// one credit at a time; the server answers each from the cached response.

#include "rpc/rpc_impl.h"

namespace rpc::detail {

void RpcImpl::send_rfr(ClientSlot& slot, size_t resp_pkt_num) {
  Session& session = *slot.session;
  tx_ctrl(session, PktHdr::make(PktType::kRfr, slot.req_type, 0, session.remote_num,
                                static_cast<uint16_t>(resp_pkt_num), slot.req_num));
}

void RpcImpl::server_process_rfr(Session& session, const PktHdr& hdr) {
  const size_t slot_index = hdr.req_num() % kSessionReqWindow;
  if (!session.sslots.has(slot_index)) {  // no request for it yet: nothing to answer
    stats_.drops.stale++;
    return;
  }
  ServerSlot& slot = session.sslots[slot_index];
  if (!slot.has_req || slot.req_num != hdr.req_num() || slot.state != ServerSlotState::kResponded) {
    stats_.drops.stale++;
    return;
  }
  if (slot.status == static_cast<uint8_t>(RespStatus::kResponseDropped))
      [[unlikely]] {  // to make room: the client is told (pkt_loss.cc)
    server_send_resp_pkt(session, slot, 0);
    return;
  }
  if (slot.resp_bulk || hdr.pkt_num() == 0 || hdr.pkt_num() >= slot.resp->num_pkts()) {
    stats_.drops.bad_header++;
    return;
  }
  server_send_resp_pkt(session, slot, hdr.pkt_num());
}

}  // namespace rpc::detail
