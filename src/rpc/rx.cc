// Receive: one burst from the transport, each packet validated (never
// trusted), dispatched by session role and packet type; credit returns.
#include "rpc/rpc_impl.h"

namespace rpc::detail {

size_t RpcImpl::process_rx() {
  const size_t n = transport_->rx_burst(rx_batch_);
  if (n == 0) return 0;
  for (size_t i = 0; i < n; i++) process_pkt(rx_batch_[i]);
  // Handlers ran on zero-copy views of these buffers; they are done now.
  transport_->post_recvs(n);
  return n;
}

bool RpcImpl::header_sane(const PktHdr& hdr, size_t data_len) {
  const size_t dpp = caps_.max_data_per_pkt;
  const size_t msg_size = hdr.msg_size();
  // The common case first, with the answer the checks below give it: a
  // plain request or response of one packet.
  const PktType type = hdr.pkt_type();
  if (hdr.plain() && (type == PktType::kReq || type == PktType::kResp) && msg_size <= dpp) {
    return hdr.pkt_num() == 0 && data_len == msg_size;
  }
  if (hdr.status() > RespStatus::kResponseDropped) return false;  // no such status
  if (hdr.restart()) {  // a header-only notice about one request (rpc/pkt_loss.cc)
    return hdr.pkt_type() == PktType::kExplCr && hdr.status() == RespStatus::kOk && !hdr.bulk() &&
           hdr.pkt_num() == 0 && msg_size == 0 && data_len == 0;
  }
  // An application error is one packet of exactly its code.
  if (hdr.status() == RespStatus::kAppError) {
    return hdr.pkt_type() == PktType::kResp && !hdr.bulk() && hdr.pkt_num() == 0 &&
           msg_size == kAppErrorBytes && data_len == kAppErrorBytes;
  }
  if (hdr.status() == RespStatus::kResponseDropped) {  // a header-only notice
    return hdr.pkt_type() == PktType::kResp && !hdr.bulk() && hdr.pkt_num() == 0 && msg_size == 0 &&
           data_len == 0;
  }
  switch (hdr.pkt_type()) {
    case PktType::kRfr:
    case PktType::kExplCr:
      return data_len == 0;
    case PktType::kReq:
    case PktType::kResp: {
      // A bulk control packet only makes sense where one-sided reads exist;
      // elsewhere it would only make the receiver allocate for nothing.
      if (hdr.bulk()) return caps_.bulk && data_len == kBulkCtrlBytes && hdr.pkt_num() == 0;
      if (msg_size <= dpp) return hdr.pkt_num() == 0 && data_len == msg_size;  // the common case
      if (msg_size > max_msg_size_) return false;
      const size_t num_pkts = pkts_for_size(msg_size, dpp);
      const size_t pkt_num = hdr.pkt_num();
      if (pkt_num >= num_pkts) return false;
      const size_t expected = pkt_num + 1 < num_pkts ? dpp : msg_size - pkt_num * dpp;
      return data_len == expected;
    }
  }
  return false;
}

void RpcImpl::process_pkt(const RxPacket& pkt) {
  stats_.rx_pkts++;
  if (pkt.len < kPktHeaderBytes) {
    stats_.drops.too_short++;
    return;
  }
  const PktHdr hdr = PktHdr::load(pkt.buf);
  if (!hdr.magic_ok()) {
    stats_.drops.bad_magic++;
    return;
  }
  const size_t data_len = pkt.len - kPktHeaderBytes;
  if (!header_sane(hdr, data_len)) {
    stats_.drops.bad_header++;
    return;
  }
  const SessionNum sn = hdr.dest_session_num();
  Session* const found = sn < sessions_.size() ? sessions_[sn].get() : nullptr;
  if (found == nullptr || !found->is_connected()) {
    stats_.drops.unknown_session++;
    return;
  }
  Session& session = *found;
  if (pkt.src_key != session.remote_src_key) {
    stats_.drops.wrong_source++;
    return;
  }
  session.stats.rx_pkts++;
  const PktType type = hdr.pkt_type();
  if (session.is_client()) {
    if (type == PktType::kResp) {
      client_process_resp(session, hdr, pkt.buf + kPktHeaderBytes, data_len);
    } else if (type == PktType::kExplCr) {
      client_process_cr(session, hdr);
    } else {
      stats_.drops.bad_header++;
    }
    return;
  }
  if (type == PktType::kReq) {
    server_process_req(session, hdr, pkt.buf, data_len);
  } else if (type == PktType::kRfr) {
    server_process_rfr(session, hdr);
  } else {
    stats_.drops.bad_header++;
  }
}

ClientSlot* RpcImpl::client_slot_for(Session& session, uint64_t req_num) {
  const size_t slot_index = req_num % kSessionReqWindow;
  if (!session.cslots.has(slot_index)) {  // never used: nothing of ours to answer
    stats_.drops.stale++;
    return nullptr;
  }
  ClientSlot& slot = session.cslots[slot_index];
  if (!slot.active || slot.req_num != req_num) {
    stats_.drops.stale++;
    return nullptr;
  }
  return &slot;
}

}  // namespace rpc::detail
