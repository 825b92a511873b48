// White-box access to an RpcImpl for tests and fuzz targets (RpcImpl names
// this struct a friend). One definition for every test program.
#pragma once

#include "rpc/rpc_impl.h"
#include "wire/pkt_hdr.h"

namespace rpc::detail {

struct RpcImplTestAccess {
  // The session with local number `sn`, or nullptr.
  static Session* session(RpcImpl& rpc, SessionNum sn) {
    return sn < rpc.sessions_.size() ? rpc.sessions_[sn].get() : nullptr;
  }
  // Hands `msg` to the Rpc as if its Nexus had received it from `from`.
  static void deliver_sm(RpcImpl& rpc, const SmMsg& msg, const NetAddr& from) {
    rpc.handle_sm(SmDelivery{msg, from});
  }
  // Bytes of the server receive budget in use.
  static size_t rx_budget_used(RpcImpl& rpc) { return rpc.rx_budget_used_bytes_; }
  // A server session's slots, as the first requests for them would
  // allocate them.
  static void alloc_server_slots(RpcImpl& rpc, Session& session) {
    for (size_t i = 0; i < kSessionReqWindow; i += SlotBlock<ServerSlot>::kChunkSlots) {
      if (!session.sslots.has(i)) rpc.alloc_server_slots(session, i);
    }
  }
  // One-sided reads posted and not yet reported done.
  static size_t bulk_reads_live(RpcImpl& rpc) { return rpc.bulk_reads_live_; }
  static size_t num_tombstones(RpcImpl& rpc) { return rpc.tombstones_.size(); }
  // As if the Nexus had declared the remote at `remote` (that incarnation) failed.
  static void remote_failed(RpcImpl& rpc, const NetAddr& remote, uint64_t incarnation) {
    rpc.handle_remote_failure(remote, incarnation);
  }
  static bool header_sane(RpcImpl& rpc, const PktHdr& hdr, size_t data_len) {
    return rpc.header_sane(hdr, data_len);
  }
};

}  // namespace rpc::detail
