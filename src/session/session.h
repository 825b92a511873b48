// Session state: the client and server ends of a connection between two
// Rpcs, their request slots (sslots), credits and backlog. Pure data; the
// protocol logic lives in src/rpc/.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "cc/timely.h"
#include "common/fifo.h"
#include "common/net_addr.h"
#include "librpc/msg_buffer.h"
#include "librpc/req_handle.h"
#include "librpc/stats.h"
#include "librpc/types.h"
#include "session/rtt.h"
#include "transport/transport.h"
#include "wire/bulk_ctrl.h"
#include "wire/pkt_hdr.h"

namespace rpc::detail {

// Requests in flight per session; request i of a slot uses req_num
// slot_index + i * kSessionReqWindow, so the server finds the slot by
// req_num % kSessionReqWindow. eRPC has 8; with 8, one session's small
// requests went back and forth in batches of 8, each end polling an empty
// socket about a third of its time: 0.6 M requests/s at a window of 32
// over udp, against 1.8 M with 32 slots (docs/benchmarks.md). Both ends
// must agree (kSmVersion 5 and later have 32).
inline constexpr size_t kSessionReqWindow = 32;
// The bit of a request's slot in Session::busy_cslots and unheard_cslots
// (a request's slot is req_num % kSessionReqWindow).
inline constexpr uint32_t slot_bit(uint64_t req_num) {
  return uint32_t{1} << (req_num % kSessionReqWindow);
}
// The smallest RpcConfig::session_credits accepted. A session may have
// fewer credits than slots (an overcommitted ring grants as few as
// kMinSessionCredits): its requests then wait for credits, not slots.
inline constexpr size_t kMinConfiguredCredits = 8;
// Packets a client may have in flight per session (RpcConfig::session_credits,
// agreed at connect; each session reserves that many RX ring entries at
// both ends): at most what the SM message's u16 field carries.
inline constexpr size_t kMaxSessionCredits = 65535;
static_assert((kSessionReqWindow & (kSessionReqWindow - 1)) == 0, "window must be a power of 2");
// A server takes a new request up to this many request numbers of its slot
// beyond the next one: requests the client gave up (Rpc::cancel, a
// deadline) before any of their packets arrived. Small, so that a packet
// forged with the peer's address has about no chance of landing in the
// window (request numbers start at a random 44-bit point) and wedging the
// slot. A request given up before any packet of it went out leaves no
// gap (its number is reused); a client that gives up this many requests of
// one slot in a row with no answer (a long outage with short deadlines)
// resets the session (SmErr::kRequestTimeout) rather than leave the slot
// stuck.
inline constexpr uint64_t kMaxReqsGivenUp = 64;
// ClientSlot::rtt_sample_index when no packet is being timed.
inline constexpr size_t kNoSample = SIZE_MAX;
// Timeouts in a row double a slot's RTO up to 2^kMaxRtoBackoff times.
inline constexpr uint8_t kMaxRtoBackoff = 6;
// With congestion control, a new client session sends at most this many
// packets before its first RTT sample (TCP's initial window is 10).
inline constexpr size_t kCcInitialWindow = 8;

// The first request number of slot 0 of a session. Both ends derive it from
// the random token of the connect request, so each session starts at its
// own place in the 44-bit request-number space (like a TCP initial sequence
// number): when a session number is reused, packets of the session that had
// it before (still in flight, or retransmitted by a peer that has not
// noticed the end yet) carry request numbers the new session never expects,
// and are dropped instead of being taken as its requests or responses.
inline uint64_t first_req_num(uint64_t connect_token) {
  return connect_token & kReqNumMask & ~uint64_t{kSessionReqWindow - 1};
}

enum class SessionRole : uint8_t { kClient, kServer };

// A session's life. Every change goes through RpcImpl::set_state
// (sm.cc), which refuses transitions not listed in session_transition_ok.
//
//   client: kConnecting --> kConnected --> kDisconnecting --> (freed)
//               |  \                 \--> (freed: reset, timeout, Rpc gone)
//               |   \--> kConnectingDoomed --> kDisconnecting / (freed)
//               \--> (freed: connect failed)
//   server: kConnected --> kDraining --> (freed when no handler holds a slot)
//               \--> (freed)
enum class SessionState : uint8_t {
  kConnecting,        // client: connect request sent, no answer yet
  kConnectingDoomed,  // client: destroyed while connecting; ended once the answer arrives
  kConnected,         // both: requests flow
  kDisconnecting,     // client: disconnect sent, waiting for its answer
  kDraining,          // server: ended by the client; freed when its last handler responds
};

constexpr bool session_transition_ok(SessionState from, SessionState to) {
  switch (from) {
    case SessionState::kConnecting:
      return to == SessionState::kConnected || to == SessionState::kConnectingDoomed ||
             to == SessionState::kDisconnecting;
    case SessionState::kConnectingDoomed:
      return to == SessionState::kDisconnecting;
    case SessionState::kConnected:
      return to == SessionState::kDisconnecting || to == SessionState::kDraining;
    case SessionState::kDisconnecting:
    case SessionState::kDraining:
      return false;
  }
  return false;
}

const char* to_string(SessionState state);

struct Session;

// No one-sided read in flight for a slot (RpcImpl::bulk_reads_ index).
inline constexpr uint32_t kNoBulkRead = UINT32_MAX;

// Client end of one request slot.
struct ClientSlot {
  Session* session = nullptr;
  bool active = false;
  bool in_stall_queue = false;
  bool bulk_req = false;  // request sent as a bulk control packet
  ReqType req_type = 0;
  uint64_t req_num = 0;       // of the active (or last) request
  uint64_t next_req_num = 0;  // for the next request in this slot
  MsgBuffer* req = nullptr;
  MsgBuffer* resp = nullptr;
  ContinuationFn cont;
  void* tag = nullptr;
  uint64_t request_id = 0;   // RequestId::value
  uint64_t deadline_ns = 0;  // RequestOptions::timeout as a clock time; 0: none
  // eRPC's packet accounting: tx index k and rx index k pair up. Request
  // packet k (k < req_pkts - 1) is answered by a credit return, the last
  // request packet by response packet 0, and RFR k by response packet
  // k - req_pkts + 1. Total wire packets: req_pkts + resp_pkts - 1.
  size_t req_pkts = 0;
  size_t resp_pkts = 0;  // 0 until response packet 0 arrives
  size_t num_tx = 0;
  size_t num_rx = 0;
  uint64_t progress_ns = 0;  // last send or accepted receive, for the RTO
  // The one packet being timed for an RTT sample (its tx index, kNoSample
  // if none) and when it was sent; a rollback drops it (Karn's rule).
  size_t rtt_sample_index = kNoSample;
  uint64_t rtt_sample_sent_ns = 0;
  size_t tx_high = 0;  // packets of this request sent at least once (only first sends are timed)
  // Packets sent before the last rollback, since the request started or
  // was restarted from packet 0: an answer to one of them is taken in
  // order even before it is sent again (RpcImpl::client_accept_late).
  size_t rolled_back_tx = 0;
  // Timeouts in a row with nothing answered in between: each doubles the
  // slot's next RTO; any accepted answer resets it.
  uint8_t rto_backoff = 0;
  // Start, or the last accepted answer that got further than any before:
  // for request_timeout_ms (answers accepted again after a restart from
  // packet 0 are not progress, or a handler that never responds would
  // keep its request alive by being resent).
  uint64_t rx_progress_ns = 0;
  size_t rx_high = 0;                // the most answers accepted (num_rx before a restart)
  MsgBuffer bulk_ctrl;               // control payload, a BulkCtrl (bulk transports)
  Exposure req_exposure;             // the request, exposed while the server may read it
  uint32_t bulk_read = kNoBulkRead;  // the response's read in flight
  // Given up (cancel, deadline) while the server may be reading the request
  // one-sided: the outcome it ends with once the server answers (cancel.cc).
  // kOk: not given up.
  Errc pending_end = Errc::kOk;
  // Requests of this slot given up in a row with no answer from the server
  // (each may have left a gap in its request numbers: kMaxReqsGivenUp).
  uint32_t given_up_unheard = 0;
  bool paced = false;      // waits in its session's pacing queue (Session::paced_queue)
  bool pace_turn = false;  // poll_wheel took it off that queue: one packet may go
  // Congestion control: this slot's rollback in the session's current loss
  // event (Timely::cuts; 0: none waiting for proof), naming the request,
  // the first packet it resent and the request's packet count. A second
  // answer to a packet from there on proves the timeout spurious
  // (RpcImpl::check_spurious_timeout).
  uint64_t undo_cut = 0;
  uint64_t undo_req_num = 0;
  size_t undo_rx_index = 0;
  size_t undo_req_pkts = 0;
};

// A server slot's life; every change goes through RpcImpl::set_slot_state
// (req.cc), which refuses transitions not listed here.
enum class ServerSlotState : uint8_t {
  kIdle,         // no request, or the last one was abandoned
  kReceiving,    // multi-packet request arriving
  kBulkReading,  // pulling the request with a one-sided read
  kInHandler,    // handler running or response deferred
  kResponded,    // response cached until the slot's next request
};

constexpr bool slot_transition_ok(ServerSlotState from, ServerSlotState to) {
  switch (from) {
    case ServerSlotState::kIdle:
    case ServerSlotState::kResponded:
      return to == ServerSlotState::kReceiving || to == ServerSlotState::kBulkReading ||
             to == ServerSlotState::kInHandler || to == ServerSlotState::kIdle;
    case ServerSlotState::kReceiving:
    case ServerSlotState::kBulkReading:
      return to == ServerSlotState::kInHandler || to == ServerSlotState::kIdle;
    case ServerSlotState::kInHandler:
      return to == ServerSlotState::kResponded;
  }
  return false;
}

// Server end of one request slot. Holds the ReqHandle given to handlers.
struct ServerSlot {
  Session* session = nullptr;
  ServerSlotState state = ServerSlotState::kIdle;
  bool has_req = false;
  bool owns_req_buf = false;
  // The current request's number; while !has_req, the number expected next.
  uint64_t req_num = 0;
  size_t req_pkts = 0;
  size_t req_rx = 0;           // request packets received in order
  size_t rx_budget_bytes = 0;  // of the session's, host's and Rpc's receive budget, held by req_buf
  // The part received of request req_num was dropped to make room for
  // others (!has_req): its later packets are answered with a restart notice.
  bool abandoned = false;
  uint64_t rx_progress_ns = 0;  // last request packet accepted (partial-request timeout)
  uint64_t rx_start_ns = 0;     // packet 0 accepted: the request's arrival rate is measured from it
  MsgBuffer req_buf;            // assembled request: owned (owns_req_buf) whenever valid
  MsgBuffer* resp = nullptr;    // response being served: &handle.pre_resp_ or &dyn_resp
  MsgBuffer dyn_resp;           // a handler-allocated response, freed with the next request
  MsgBuffer bulk_ctrl;          // control payload, a BulkCtrl (bulk transports)
  bool resp_bulk = false;
  Exposure resp_exposure;            // the cached bulk response, until the next request
  uint32_t bulk_read = kNoBulkRead;  // the request's read in flight
  ReqHandle handle;
  // RespStatus of the cached response; kResponseDropped once it was dropped
  // to make room (RpcImpl::drop_settled_response): the request and RFRs
  // for it are then answered with that status alone.
  uint8_t status = 0;
  size_t resp_budget_bytes = 0;  // of the host's and Rpc's budget, held by dyn_resp
  uint64_t resp_sent_ns = 0;     // a packet of the cached response last went out
};

// The request slots of one end of a session, allocated when first needed,
// eight at a time: a client's first eight when the session is created and
// the next eight when a request finds all its slots busy; a server's when
// the first request for one of them arrives. An idle server session holds
// no slots (a server Rpc may keep tens of thousands of sessions), and a
// session that never has more than eight requests in flight holds eight:
// a client always takes its lowest free slot (that no request given up
// unanswered marks: Session::unheard_cslots). Slots never move once made
// (the engine keeps pointers to them). Iteration visits the allocated
// slots only.
template <typename Slot>
class SlotBlock {
 public:
  static constexpr size_t kChunkSlots = 8;
  static constexpr size_t kChunks = kSessionReqWindow / kChunkSlots;
  static_assert(kChunks * kChunkSlots == kSessionReqWindow);

  // Whether any slot exists.
  bool allocated() const { return num_chunks_ != 0; }
  // How many slots exist.
  size_t size() const { return num_chunks_ * kChunkSlots; }
  // Whether slot i exists.
  bool has(size_t i) const { return chunks_[i / kChunkSlots] != nullptr; }
  // Makes the slots of the chunk holding slot i, calling init(slot, index)
  // for each. REQUIRES: !has(i).
  template <typename Init>
  void allocate_chunk_of(size_t i, Init&& init) {
    const size_t c = i / kChunkSlots;
    chunks_[c] = std::make_unique<std::array<Slot, kChunkSlots>>();
    num_chunks_++;
    for (size_t k = 0; k < kChunkSlots; k++) init((*chunks_[c])[k], c * kChunkSlots + k);
  }
  // Drops the chunk holding slot i (its slots must hold nothing).
  void free_chunk_of(size_t i) {
    if (chunks_[i / kChunkSlots] == nullptr) return;
    chunks_[i / kChunkSlots].reset();
    num_chunks_--;
  }
  // The lowest slot whose chunk does not exist yet, or kSessionReqWindow.
  size_t first_missing() const {
    for (size_t c = 0; c < kChunks; c++) {
      if (chunks_[c] == nullptr) return c * kChunkSlots;
    }
    return kSessionReqWindow;
  }
  // REQUIRES: has(i).
  Slot& operator[](size_t i) { return (*chunks_[i / kChunkSlots])[i % kChunkSlots]; }
  const Slot& operator[](size_t i) const { return (*chunks_[i / kChunkSlots])[i % kChunkSlots]; }

  template <typename Block, typename Ref>
  class Iter {
   public:
    Iter(Block* block, size_t i) : block_(block), i_(i) { skip_missing(); }
    Ref operator*() const { return (*block_)[i_]; }
    Iter& operator++() {
      i_++;
      skip_missing();
      return *this;
    }
    bool operator!=(const Iter& other) const { return i_ != other.i_; }

   private:
    void skip_missing() {
      while (i_ < kSessionReqWindow && !block_->has(i_)) i_ += kChunkSlots;
    }
    Block* block_;
    size_t i_;
  };
  Iter<SlotBlock, Slot&> begin() { return {this, 0}; }
  Iter<SlotBlock, Slot&> end() { return {this, kSessionReqWindow}; }
  Iter<const SlotBlock, const Slot&> begin() const { return {this, 0}; }
  Iter<const SlotBlock, const Slot&> end() const { return {this, kSessionReqWindow}; }

 private:
  std::array<std::unique_ptr<std::array<Slot, kChunkSlots>>, kChunks> chunks_;
  size_t num_chunks_ = 0;
};

struct BacklogEntry {
  ReqType req_type = 0;
  MsgBuffer* req = nullptr;
  MsgBuffer* resp = nullptr;
  ContinuationFn cont;
  void* tag = nullptr;
  uint64_t request_id = 0;
  uint64_t deadline_ns = 0;
};

// A remote host (an IPv4 address) as a server sees it: the sessions it
// opened and what they hold of the receive budget, so that no one host
// takes more than its share (RpcConfig::max_sessions_per_host,
// rx_budget_per_host_bytes; docs/reliability.md, "Budgets").
struct RemoteHost {
  uint32_t ipv4 = 0;
  size_t server_sessions = 0;
  size_t budget_bytes = 0;  // requests being received or handled, and cached responses
  uint64_t refused_ns = 0;  // the last request refused for this host's share, 0: none
};

struct Session {
  SessionRole role = SessionRole::kClient;
  SessionState state = SessionState::kConnecting;
  SessionNum local_num = kInvalidSessionNum;
  SessionNum remote_num = kInvalidSessionNum;
  RpcId remote_rpc_id = 0;
  NetAddr remote_nexus;      // session-management address of the peer
  RoutingInfo remote_route;  // resolved
  uint64_t remote_src_key = 0;
  uint64_t sm_token = 0;            // of the connect request that created the session
  uint64_t remote_incarnation = 0;  // of the remote Nexus, learned at connect
  bool holds_remote_ref = false;    // the Nexus watches remote_nexus for us
  bool route_resolved = false;      // remote_route holds a transport reference
  // Client, while connecting: the routing info its connect request carried
  // (the transport's connection offer, given back unless the answer uses it).
  RoutingInfo local_offer;
  bool offer_pending = false;
  // Credits agreed at connect (the client's ask until then) and those not in
  // use; the session reserves max_credits RX ring entries.
  size_t max_credits = 0;
  size_t credits = 0;
  // Congestion control: credits held back until the session's first RTT
  // sample (kCcInitialWindow), so that many sessions starting at once do
  // not each send a full window into a queue they know nothing about.
  size_t withheld_credits = 0;
  // RX ring entries this session's credits hold (at most max_credits; less
  // when the session was admitted beyond the ring's room: RpcImpl::admit).
  size_t ring_entries = 0;
  SlotBlock<ClientSlot> cslots;  // client sessions only
  SlotBlock<ServerSlot> sslots;  // server sessions, from their first request
  Fifo<BacklogEntry> backlog;    // requests waiting for a free slot
  size_t backlog_deadlines = 0;  // entries of the backlog with a deadline
  size_t pending_handlers = 0;   // server: handlers not yet responded
  size_t rx_budget_bytes = 0;    // server: bytes of requests being received or handled
  // Client: bit i is set while cslots[i] holds a request (a copy of its
  // `active`), so a new request finds the lowest free slot at once instead
  // of walking up to 32 slots, a cache line each.
  uint32_t busy_cslots = 0;
  // Client: bit i is set while cslots[i]'s last request was given up
  // (cancel, a deadline) after it went out, with no response heard (credit
  // returns do not count: the server may have it whole): the server may
  // still be running its handler, and would hold the slot's next request
  // until that handler answers. A new request takes such a slot only when
  // no other can be had (RpcImpl::lowest_free_client_slot). Cleared by a
  // response to the given-up request (check_stale_answer) or to a later
  // one in the slot (client_complete).
  uint32_t unheard_cslots = 0;
  // Client: where the next turn among free slots all marked in
  // unheard_cslots starts (RpcImpl::free_client_slot_beyond_heard).
  uint8_t unheard_turn = 0;
  static_assert(kSessionReqWindow <= 32, "busy_cslots and unheard_cslots have a bit per slot");
  RemoteHost* host = nullptr;         // server: the remote host's share (RpcImpl::hosts_)
  uint64_t rx_budget_refused_ns = 0;  // server: the last request refused for the session's
                                      // budget (rpc/pkt_loss.cc), 0 if none
  SessionStats stats;
  RttEstimator rtt;  // client: its RTO (rtt.h)
  // Client, with congestion control: its rate, and when the next packet
  // may leave while it is paced.
  Timely timely;
  uint64_t next_tx_ns = 0;
  // Slots waiting for their next paced packet, by index, in the order they
  // asked (a ring: each slot is in it at most once), and whether the
  // session's wake-up is in the timing wheel. Served one packet per turn
  // (rpc/cc.cc), so no slot of the session can starve the others.
  std::array<uint8_t, kSessionReqWindow> paced_queue{};
  uint8_t paced_head = 0;
  uint8_t paced_count = 0;
  bool in_wheel = false;
  // The slots the last cut's loss event rolled back that no second answer
  // has yet proven spurious; at 0 the cut is undone. A slot that timed out
  // twice in one event blocks the undo (its loss was real, or the path is
  // slower than the RTO).
  uint32_t cut_slots_unproven = 0;
  bool cut_undo_blocked = false;

  bool is_client() const { return role == SessionRole::kClient; }
  bool is_connected() const { return state == SessionState::kConnected; }
  bool is_connecting() const {
    return state == SessionState::kConnecting || state == SessionState::kConnectingDoomed;
  }
};

// Binds a new session to its connect request: the token, and the request
// numbers derived from it (see first_req_num).
// Server slots allocated later take theirs from sm_token then
// (RpcImpl::server_slots_for).
inline void bind_to_connect(Session& session, uint64_t token) {
  session.sm_token = token;
  const uint64_t first = first_req_num(token);
  for (size_t i = 0; i < kSessionReqWindow; i++) {
    if (session.cslots.has(i)) session.cslots[i].next_req_num = first + i;
    if (session.sslots.has(i)) session.sslots[i].req_num = first + i;  // expected first
  }
}

}  // namespace rpc::detail
