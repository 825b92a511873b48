// Large messages on transports with one-sided operations: the sender sends
// one control packet {addr, rkey, len} of its registered buffer and the
// receiver pulls the payload with a read into its own buffer (rrppcc
// style). A request's read completing runs the handler; a response's read
// completing completes the request. The server keeps the response until
// the slot's next request arrives, which is the acknowledgement.
#include <cstring>

#include "rpc/rpc_impl.h"

namespace rpc::detail {

namespace {

constexpr uint64_t kCookieServerBit = 1ull << 47;

uint64_t make_cookie(SessionNum sn, bool server, uint64_t req_num) {
  return uint64_t{sn} << 48 | (server ? kCookieServerBit : 0) | (req_num & kReqNumMask);
}

}  // namespace

void RpcImpl::fill_bulk_ctrl(MsgBuffer& ctrl, const MsgBuffer& payload) {
  const auto* region = MsgBufferAccess::region(payload);
  const BulkCtrl c{reinterpret_cast<uint64_t>(payload.data()) -
                       (region != nullptr ? region->reg.remote_addr_base : 0),
                   region != nullptr ? region->reg.rkey : 0, static_cast<uint32_t>(payload.size())};
  std::memcpy(ctrl.data(), &c, sizeof(c));
}

void RpcImpl::server_start_bulk_read(Session& session, ServerSlot& slot, uint32_t msg_size,
                                     const uint8_t* ctrl_data) {
  BulkCtrl c;
  std::memcpy(&c, ctrl_data, sizeof(c));
  // The length to read is the peer's word: it must be the size the header
  // announced and within what this Rpc receives at all.
  if (c.len != msg_size || c.len > max_msg_size_) {
    stats_.drops.bad_header++;
    slot.has_req = false;
    return;
  }
  if (!alloc_req_buf(session, slot, c.len)) {  // over budget or out of memory: the client retries
    slot.has_req = false;
    return;
  }
  set_slot_state(slot, ServerSlotState::kBulkReading);
  const BulkOp op{&session.remote_route,
                  slot.req_buf.data(),
                  MsgBufferAccess::lkey(slot.req_buf),
                  MsgBufferAccess::region(slot.req_buf)->reg.desc,
                  c.addr,
                  c.rkey,
                  c.len,
                  make_cookie(session.local_num, true, slot.req_num)};
  stats_.bulk_reads++;
  if (!transport_->post_read(op)) {
    release_server_slot(slot);  // the client's RTO resends the control packet
    slot.has_req = false;
    set_slot_state(slot, ServerSlotState::kIdle);
  }
}

void RpcImpl::client_start_bulk_read(Session& session, ClientSlot& slot, const uint8_t* ctrl_data) {
  BulkCtrl c;
  std::memcpy(&c, ctrl_data, sizeof(c));
  if (c.len != slot.resp->size()) {
    client_complete(slot, Errc::kRespBufferTooSmall, 0);
    return;
  }
  slot.bulk_resp_reading = true;
  const BulkOp op{&session.remote_route,
                  slot.resp->data(),
                  MsgBufferAccess::lkey(*slot.resp),
                  MsgBufferAccess::region(*slot.resp)->reg.desc,
                  c.addr,
                  c.rkey,
                  c.len,
                  make_cookie(session.local_num, false, slot.req_num)};
  stats_.bulk_reads++;
  if (!transport_->post_read(op)) bulk_resp_read_failed(slot);
}

// The response's read failed: forget that its control packet arrived and
// send the request's last packet again, which the server answers from its
// cache with the control packet. The packet counts move together, so the
// session's credits stay as they are (taking one back could wrap them at 0).
void RpcImpl::bulk_resp_read_failed(ClientSlot& slot) {
  slot.bulk_resp_reading = false;
  slot.num_rx--;
  slot.num_tx--;
  slot.resp_pkts = 0;
  client_try_send(slot);
}

void RpcImpl::poll_bulk() {
  std::array<BulkCompletion, 16> done;
  const size_t n = transport_->poll_bulk(done);
  for (size_t i = 0; i < n; i++) {
    const uint64_t cookie = done[i].cookie;
    const auto sn = static_cast<SessionNum>(cookie >> 48);
    const uint64_t req_num = cookie & kReqNumMask;
    if (sn >= sessions_.size() || sessions_[sn] == nullptr) continue;  // session gone
    Session& session = *sessions_[sn];
    if (!session.is_connected()) continue;  // ending: its slots are being released
    if ((cookie & kCookieServerBit) != 0) {
      ServerSlot& slot = session.sslots[req_num % kSessionReqWindow];
      if (slot.req_num != req_num || slot.state != ServerSlotState::kBulkReading) continue;
      if (!done[i].ok) {
        release_server_slot(slot);
        slot.has_req = false;
        set_slot_state(slot, ServerSlotState::kIdle);
        continue;
      }
      slot.req_rx = 1;
      invoke_handler(session, slot, slot.handle.req_type());
      continue;
    }
    ClientSlot& slot = session.cslots[req_num % kSessionReqWindow];
    if (!slot.active || slot.req_num != req_num || !slot.bulk_resp_reading) continue;
    if (!done[i].ok) {
      bulk_resp_read_failed(slot);
      continue;
    }
    slot.bulk_resp_reading = false;
    client_complete(slot, Errc::kOk, slot.resp->size());
  }
}

}  // namespace rpc::detail
