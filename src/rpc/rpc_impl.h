// The per-thread engine. Its implementation is split by protocol concern,
// as in eRPC: ev_loop.cc (the loop), tx.cc (TX batching and fault
// injection), req.cc (client requests, server request packets), resp.cc
// (server responses, client response packets), rx.cc (receive, validate,
// dispatch, credit returns), bulk.cc (large messages by one-sided read),
// pkt_loss.cc (RTO and go-back-N), sm.cc (connect / disconnect), bg.cc
// (background handler handoff), rpc.cc (construction, buffers, public API).
#pragma once

#include <array>
#include <atomic>
#include <bit>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "cc/timely.h"
#include "cc/timing_wheel.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/loop_clock.h"
#include "common/mailbox.h"

#include "librpc/coro.h"
#include "librpc/rpc.h"
#include "memory/allocator.h"
#include "nexus/rpc_endpoint.h"
#include "session/session.h"
#include "transport/transport.h"
#include "wire/pkt_hdr.h"
#include "wire/sm_msg.h"

namespace rpc::detail {

class NexusImpl;
struct HandlerEntry;

struct ReqHandleAccess {
  static void init(ReqHandle& h, Rpc* rpc, void* context, ServerSlot* slot) {
    h.rpc_ = rpc;
    h.context_ = context;
    h.slot_ = slot;
  }
  static ServerSlot* slot(ReqHandle& h) { return h.slot_; }
  static MsgBuffer& req(ReqHandle& h) { return h.req_; }
  static MsgBuffer& pre_resp(ReqHandle& h) { return h.pre_resp_; }
  static void set_req_type(ReqHandle& h, ReqType t) { h.req_type_ = t; }
  static void set_background(ReqHandle& h, bool bg) { h.is_background_ = bg; }
  static std::atomic<uint64_t>& bg_state(ReqHandle& h) { return h.bg_state_; }
};

// Datapath calls from a thread other than the Rpc's own corrupt its state
// silently; builds with assertions (every CI build) check the caller at
// the public entry points, like eRPC's in_dispatch() asserts.
#ifndef NDEBUG
#define RPC_CHECK_OWNER(what)                                                                  \
  RPC_CHECK_USAGE(std::this_thread::get_id() == owner_thread_,                                 \
                  "Rpc {}: {} called from a thread that does not own the Rpc (an Rpc belongs " \
                  "to the thread that created it)",                                            \
                  config_.rpc_id, what)
#else
#define RPC_CHECK_OWNER(what) \
  do {                        \
  } while (0)
#endif

// A session-management message delivered by the Nexus to this Rpc.
struct SmDelivery {
  SmMsg msg;
  NetAddr from;
  // Not a message: the Nexus declared the remote at `from` failed in
  // incarnation msg.incarnation.
  bool remote_failure = false;
};

// A response produced on a background thread, applied on the Rpc thread.
struct BgResponse {
  ReqHandle* handle;
  MsgBuffer resp;
  bool handler_failed = false;  // the handler threw before responding
  RespStatus status = RespStatus::kOk;
};

// Session-management requests from the network waiting for the Rpc thread:
// more are dropped (the peer retransmits), so a flood cannot grow memory.
inline constexpr size_t kMaxQueuedSmRequests = 1024;
// A request received in part must arrive at least this fast, counted from
// its first packet over the bytes that have arrived (after a grace of
// partial_request_timeout_ms), or be dropped when the budget is needed: a
// peer trickling packets just inside the silence timeout would otherwise
// hold its share of the receive budget for as long as it likes.
// Low enough for a legitimate client slowed by congestion control: one of
// 32 clients of an incast through a 200 Mbit/s link gets 0.8 MB/s, and an
// earlier floor of 10 MB/s made the server drop every such client's 1 MiB
// request (bench/incast.sh). Congestion control never paces a session
// below twice this for each of its kSessionReqWindow requests (rpc.cc).
// What bounds a trickling peer is the receive budget; this bounds how long.
inline constexpr uint64_t kMinRxBytesPerSec = 16'000;
// Ended server sessions remembered so that their connect cannot be replayed.
inline constexpr size_t kMaxTombstones = 4096;
// Credits of a session admitted when the RX ring has no room left (four
// small requests in flight at once): docs/design.md, "Sessions and ring
// room".
inline constexpr size_t kMinSessionCredits = 4;

// What a session is admitted with: its credits, and the RX ring entries
// reserved for them (fewer than the credits when the ring is overcommitted).
struct Admission {
  size_t credits;
  size_t ring_entries;
};

class RpcImpl final : public RpcEndpoint {
 public:
  RpcImpl(Rpc& owner, NexusImpl& nexus, const RpcConfig& config);
  ~RpcImpl();
  // ~Rpc's work: fails what is outstanding, ends the sessions, drains
  // reads, destroys suspended coroutines. Idempotent.
  void shutdown();

  // --- public API (rpc.cc, sm.cc, req.cc, resp.cc, ev_loop.cc) ---
  Result<SessionNum> create_session(const std::string& remote_uri, RpcId remote_rpc_id);
  Result<SessionNum> connect(const std::string& remote_uri, RpcId remote_rpc_id,
                             std::chrono::milliseconds timeout);
  void spawn(std::coroutine_handle<TaskPromise<void>> task);
  void count_task_exception(const char* what);  // coro.cc
  void coroutine_handler_ended(SessionNum sn, size_t slot_index, uint64_t req_num,
                               std::exception_ptr e);
  // A handler threw (or a coroutine handler, from coro.cc); req.cc.
  void handler_failed(SessionNum sn, size_t slot_index, uint64_t req_num, const char* what);
  Result<void> destroy_session(SessionNum sn);
  // The public alloc_msg_buffer, free_msg_buffer and app_msg_buffer's
  // caller check (the engine itself calls the unchecked ones).
  void check_owner_or_background(const char* what) const noexcept;
  bool is_connected(SessionNum sn) const;
  const SessionStats* session_stats(SessionNum sn) const;
  size_t num_active_sessions() const;
  MsgBuffer alloc_msg_buffer(size_t max_size) noexcept;
  void free_msg_buffer(MsgBuffer& buf) noexcept;
  // app_memory.cc
  Result<AppMemory> register_memory(void* addr, size_t len, AppMemoryOptions options);
  Result<void> deregister_memory(const AppMemory& mem);
  MsgBuffer app_msg_buffer(const AppMemory& mem, void* data, size_t size) noexcept;
  size_t app_memory_in_flight(const AppMemory& mem) const;
  Errc enqueue_request(SessionNum sn, ReqType req_type, MsgBuffer& req, MsgBuffer& resp,
                       Continuation cont, void* tag) noexcept;
  Errc enqueue_request(SessionNum sn, ReqType req_type, MsgBuffer& req, MsgBuffer& resp,
                       ContinuationFn&& cont, std::chrono::microseconds timeout,
                       RequestId* id_out) noexcept;
  bool cancel(RequestId id) noexcept;
  void enqueue_response(ReqHandle& handle, MsgBuffer& resp) noexcept;
  // pre_resp holds the code (Rpc::enqueue_error_response).
  void enqueue_error_response(ReqHandle& handle, MsgBuffer& pre_resp) noexcept;
  void run_event_loop(std::chrono::microseconds duration) noexcept;
  void run_event_loop_once() noexcept;

  RpcId rpc_id() const { return config_.rpc_id; }
  // The loop runs, or an application callback (a continuation, a session
  // callback) that may have been called outside it: by cancel(),
  // destroy_session(), ~Rpc.
  bool in_loop_or_callback() const noexcept { return in_event_loop_ || callbacks_running_ != 0; }
  bool in_event_loop() const noexcept {
    RPC_CHECK_OWNER("in_event_loop");
    return in_loop_or_callback();
  }
  // Folds in the counters kept elsewhere (the transport's, and atomics
  // written by the Nexus and background threads).
  const RpcStats& stats() const {
    RPC_CHECK_OWNER("stats");
    // The transport's count may take a system call (udp): at most once a
    // millisecond, so that a loop that reads stats every iteration stays fast.
    if (const uint64_t now = read_clock(); now - rx_drops_refreshed_ns_ >= 1'000'000) {
      transport_->refresh_rx_drops();
      rx_drops_refreshed_ns_ = now;
    }
    stats_.drops.oversized = transport_->rx_drops.oversized;
    stats_.drops.rx_ring_full = transport_->rx_drops.ring_full;
    stats_.ring_entries_reserved = ring_reserved_;
    stats_.ring_credits_overcommitted = ring_overcommit_;
    stats_.handler_exceptions = handler_exceptions_.load(std::memory_order_relaxed);
    stats_.sm_requests_dropped = sm_requests_dropped_.load(std::memory_order_relaxed);
    stats_.msg_buffer_allocs_over_limit = allocator_->limit_failures();
    stats_.msg_buffer_bytes = allocator_->bytes_reserved();
    stats_.rx_budget_bytes = rx_budget_used_bytes_;
    return stats_;
  }
  size_t max_msg_size() const { return max_msg_size_; }
  size_t max_data_per_pkt() const { return caps_.max_data_per_pkt; }
  const std::string& transport_name() const { return transport_name_; }
  Transport& transport() { return *transport_; }
  // Tests: the engine reads its time from `clock` from now on, so that
  // timeouts (RTO, request and partial-request timeouts) fire when the test
  // moves the time, not when the wall clock does. Times already recorded
  // came from the old clock: set it before the Rpc has requests in flight,
  // with the manual clock starting at now_ns().
  void set_clock_for_testing(uint64_t (*manual)()) {
    test_clock_ = manual;
    now_ns_ = test_clock_();
    last_loss_scan_ns_ = now_ns_;
  }

  // --- RpcEndpoint: called by the Nexus, from its threads ---
  void sm_deliver(const SmMsg& msg, const NetAddr& from) override;
  // An exception fails the request with kHandlerFailed.
  void run_background_handler(const HandlerEntry& entry, ReqHandle& handle,
                              uint64_t run) noexcept override;
  void remote_failed(const NetAddr& remote, uint64_t incarnation) override;

 private:
  // ev_loop.cc
  void poll_sm_queue();
  // tx.cc (tx_enqueue is inline, here)
  // lkey: the data's registration; hdr_lkey: the header's (they differ
  // for a view of application memory).
  // Inline: once per packet sent, and its six arguments cost more to pass
  // than its body to run.
  void tx_enqueue(const uint8_t* hdr, const uint8_t* data, uint32_t data_len, uint32_t lkey,
                  uint32_t hdr_lkey, Session& session) {
    session.stats.tx_pkts++;
    stats_.tx_pkts++;
    if (drop_enabled_ && inject_drop()) [[unlikely]] {
      stats_.tx_dropped_injected++;
      return;
    }
    tx_batch_[tx_batch_size_++] =
        TxItem{&session.remote_route, hdr, data, data_len, lkey, hdr_lkey};
    if (tx_batch_size_ == kTxBatch) [[unlikely]]
      tx_flush();
  }
  // The packet pkt_num of `m` (its header already written).
  void tx_msg_pkt(MsgBuffer& m, size_t pkt_num, Session& session) {
    tx_enqueue(MsgBufferAccess::hdr(m, pkt_num), MsgBufferAccess::pkt_data(m, pkt_num),
               static_cast<uint32_t>(MsgBufferAccess::pkt_data_len(m, pkt_num)),
               MsgBufferAccess::lkey(m), MsgBufferAccess::hdr_lkey(m), session);
  }
  uint8_t* ctrl_hdr_slot();
  void tx_ctrl(Session& session, const PktHdr& hdr);
  void tx_credit_return(Session& session, ReqType req_type, size_t pkt_num, uint64_t req_num);
  void tx_restart_notice(Session& session, ReqType req_type, uint64_t req_num);
  void tx_flush();
  // The first request or response enqueued from outside the event loop
  // since its last iteration goes out now, not at the end of the next
  // iteration: that iteration polls the transport first (on udp, a system
  // call that costs about as much as the send) and the packet would wait
  // for it. Later ones until the loop runs join a batch, so that a burst
  // enqueued from outside still leaves in one transport call. Inside the
  // loop (handlers, continuations) packets join the iteration's batch.
  void flush_if_outside_loop() {
    if (in_event_loop_ || flushed_outside_loop_) return;
    flushed_outside_loop_ = true;
    tx_flush();
  }
  bool inject_drop();
  // req.cc (client)
  template <typename Install>
  Errc enqueue(SessionNum sn, ReqType req_type, MsgBuffer& req, MsgBuffer& resp, bool has_cont,
               Install&& install, void* tag, std::chrono::microseconds timeout,
               RequestId* id_out) noexcept;
  void start_request(ClientSlot& slot, BacklogEntry&& entry);
  // Inlined into enqueue, the per-request path, which GCC stopped doing
  // on its own once the busy-slot bitmap made both a little larger.
  [[gnu::always_inline]] inline void start_request(ClientSlot& slot, ReqType req_type,
                                                   MsgBuffer& req, MsgBuffer& resp, void* tag,
                                                   uint64_t request_id, uint64_t deadline_ns);
  // REQUIRES: !session.backlog.empty().
  BacklogEntry take_backlog_front(Session& session) {
    if (session.backlog.front().deadline_ns != 0) session.backlog_deadlines--;
    return session.backlog.take_front();
  }
  void client_try_send(ClientSlot& slot);
  void send_req_pkt(ClientSlot& slot, size_t pkt_num);
  void send_rfr(ClientSlot& slot, size_t resp_pkt_num);
  void process_stall_queue();
  // req.cc (server)
  void server_process_req(Session& session, const PktHdr& hdr, uint8_t* pkt, size_t data_len);
  void server_new_req(Session& session, ServerSlot& slot, const PktHdr& hdr, uint8_t* pkt,
                      size_t data_len);
  // Runs the handler on the request already in slot.handle (an owned buffer
  // or a zero-copy view).
  void invoke_handler(Session& session, ServerSlot& slot, ReqType req_type);
  // invoke_handler on the request assembled in slot.req_buf (owned).
  void invoke_handler_on_req_buf(Session& session, ServerSlot& slot, ReqType req_type) {
    ReqHandleAccess::req(slot.handle) = slot.req_buf;
    invoke_handler(session, slot, req_type);
  }
  // Ends what the slot holds of its request and response. Inline, like
  // free_req_buf: every new request releases its slot, and usually there
  // is nothing to end.
  void release_server_slot(ServerSlot& slot) {
    // A read still filling the request buffer keeps it until it is done.
    if (slot.bulk_read != kNoBulkRead) [[unlikely]]
      orphan_server_read(slot);
    free_req_buf(slot);
    // The cached response is acknowledged (or its client gone): peers can
    // no longer read it.
    if (slot.resp_exposure.active()) [[unlikely]]
      transport_->revoke_exposure(slot.resp_exposure);
    free_dyn_resp(slot);
    slot.resp = nullptr;
  }
  void set_slot_state(ServerSlot& slot, ServerSlotState to);
  bool alloc_req_buf(Session& session, ServerSlot& slot, size_t size);
  bool budget_admits(Session& session, size_t bytes);
  // Only owned buffers are ever in req_buf (a zero-copy request's view
  // lives in the handle), and only they are charged to the budget.
  void free_req_buf(ServerSlot& slot) {
    if (slot.owns_req_buf) free_owned_req_buf(slot);
  }
  void free_owned_req_buf(ServerSlot& slot);
  void abandon_partial_request(Session& session, ServerSlot& slot);
  // resp.cc
  void apply_response(ReqHandle& handle, MsgBuffer& resp, RespStatus status);
  void server_send_resp_pkt(Session& session, ServerSlot& slot, size_t pkt_num);
  [[gnu::noinline]] void send_resp_dropped(Session& session, ServerSlot& slot);
  void server_process_rfr(Session& session, const PktHdr& hdr);
  void client_process_resp(Session& session, const PktHdr& hdr, const uint8_t* data,
                           size_t data_len);
  void post_bg_response(ReqHandle& handle, MsgBuffer& resp, RespStatus status);
  void client_complete(ClientSlot& slot, Errc errc, size_t resp_size, uint32_t app_error = 0);
  // rx.cc
  size_t process_rx();  // returns packets received
  void process_pkt(const RxPacket& pkt);
  bool header_sane(const PktHdr& hdr, size_t data_len);
  void client_process_cr(Session& session, const PktHdr& hdr);
  void client_restart_request(ClientSlot& slot);
  bool client_accept(ClientSlot& slot, size_t rx_index);
  bool client_accept_late(ClientSlot& slot, size_t rx_index);
  void note_progress(ClientSlot& slot);
  ClientSlot* client_slot_for(Session& session, uint64_t req_num);
  // Congestion control (pkt_loss.cc): a second answer to a packet that a
  // timeout resent, from a slot still on that request or done with it.
  void check_spurious_timeout(ClientSlot& slot, uint64_t req_num, size_t rx_index);
  void check_stale_answer(Session& session, const PktHdr& hdr);
  // The RTT sample Timely gets: without the time this loop was away, when
  // it was away long (the answer may have waited in the RX queue all that
  // time: our scheduling, not the network's queue). 0: none to give.
  uint64_t timely_sample_ns(uint64_t sample_ns) const {
    if (loop_gap_ns_ <= kLoopGapSlackNs) return sample_ns;
    return sample_ns - std::min(sample_ns, loop_gap_ns_);
  }
  // bulk.cc
  bool use_bulk(size_t msg_size) const {
    return caps_.bulk && msg_size > config_.bulk_threshold_bytes;
  }
  bool expose_payload(const Session& session, MsgBuffer& ctrl, const MsgBuffer& payload,
                      Exposure& exposure);
  void server_start_bulk_read(Session& session, ServerSlot& slot, uint32_t msg_size,
                              const uint8_t* ctrl_data);
  void bulk_resp_read_failed(ClientSlot& slot);
  void client_start_bulk_read(Session& session, ClientSlot& slot, const uint8_t* ctrl_data);
  uint32_t post_bulk_read(Session& session, bool server, uint64_t req_num, const BulkCtrl& ctrl,
                          MsgBuffer& dst);
  void free_bulk_read(uint32_t index);
  void orphan_server_read(ServerSlot& slot);
  void orphan_client_read(ClientSlot& slot, ContinuationFn&& cont, const Completion& completion);
  void finish_orphan(uint32_t index);
  void poll_bulk();
  void reset_failed_bulk_path(uint64_t path);
  void drain_bulk_reads();
  // cc.cc: pacing of sessions below the full rate. pace() is true when
  // the slot's next packet may leave now; false when it waits in its
  // session's pacing queue (wait_for_pace).
  bool pace(ClientSlot& slot);
  void wait_for_pace(ClientSlot& slot);
  void schedule_pacing(Session& session);
  // The session's initial window ends (its first RTT sample or timeout):
  // the credits held back at connect (kCcInitialWindow) are given back.
  static void end_initial_window(Session& session) {
    session.credits += session.withheld_credits;
    session.withheld_credits = 0;
  }
  void poll_wheel();
  // pkt_loss.cc
  void scan_for_loss();
  bool scan_client_session(Session& session);
  void scan_server_session(Session& session);
  void drop_settled_response(ServerSlot& slot);
  void rollback(ClientSlot& slot);
  void time_out_request(ClientSlot& slot);
  // sm.cc
  void handle_sm(const SmDelivery& d);
  void handle_connect_req(const SmDelivery& d);
  void handle_connect_resp(const SmDelivery& d);
  void handle_disconnect_req(const SmDelivery& d);
  void handle_disconnect_resp(const SmDelivery& d);
  void handle_remote_failure(const NetAddr& remote, uint64_t incarnation);
  void hold_remote(Session& session, const NetAddr& remote, uint64_t incarnation);
  void handle_session_reset_req(const SmDelivery& d);
  void send_sm_resp(const SmMsg& req, const NetAddr& to, SmErr err, SessionNum server_sn,
                    const Session* accepted = nullptr);
  void send_disconnect(Session& session);
  void send_disconnect_for(const NetAddr& to, RpcId server_rpc_id, SessionNum client_sn,
                           SessionNum server_sn, uint64_t token);
  void send_session_reset(Session& session);
  // The credits a new session that wants `wanted` gets, and the RX ring
  // entries that back them (credits.cc: the ring's room first, then
  // kMinSessionCredits overcommitted).
  Admission admit(size_t wanted) const;
  // Gives the session these credits (none in flight), moving its ring
  // reservation and overcommit.
  void set_session_credits(Session& session, Admission a);
  size_t credits_to_grant(size_t asked) const;
  // sessions.cc
  void set_state(Session& session, SessionState to);
  // Admits the session with admit(wanted_credits); nullptr past
  // max_sessions.
  Session* alloc_session(SessionRole role, size_t wanted_credits);
  // A server session's slots, allocated at its first request (SlotBlock).
  void alloc_server_slots(Session& session, size_t index);
  bool add_client_slots(Session& session);
  void start_backlog(Session& session);
  // The lowest free slot of a client session, made if need be (nullptr when
  // none can be had). A client's slots exist from 0 up, so the lowest clear
  // bit of busy_cslots is a free slot or, at size(), all made are busy.
  // Slots whose last request was given up unheard (Session::unheard_cslots)
  // come last: after the slots not made yet.
  ClientSlot* lowest_free_client_slot(Session& session) {
    const auto index =
        static_cast<size_t>(std::countr_one(session.busy_cslots | session.unheard_cslots));
    if (index < session.cslots.size()) [[likely]]
      return &session.cslots[index];
    return free_client_slot_beyond_heard(session);
  }
  ClientSlot* free_client_slot_beyond_heard(Session& session);
  // A server slot's response buffers, allocated at its first request;
  // false when out of memory (the request is dropped and counted).
  bool ensure_slot_buffers(ServerSlot& slot);
  void free_session(Session& session);
  void add_tombstone(uint64_t token);
  void fail_client_requests(Session& session, Errc errc);
  void reset_client_session(Session& session, Errc errc, SmErr why, bool send_disc,
                            ClientSlot* timed_out = nullptr);
  void disconnect_client_session(Session& session);
  void end_server_session(Session& session, SessionEvent event, SmErr why);
  void notify(SessionNum sn, SessionEvent event, SmErr err);
  void notify_server(const Session& session, SessionEvent event, SmErr err);
  void run_continuation(ContinuationFn& cont, const Completion& completion) noexcept;
  void end_request_early(ClientSlot& slot, Errc errc);
  void fail_backlog_entries(Session& session, std::vector<BacklogEntry>& entries, Errc errc);
  void expire_backlog_deadlines(Session& session);
  // app_memory.cc: views of application memory the engine takes (a request
  // or response buffer, a response) and gives back. hold_view aborts, naming
  // `what`, for a view whose registration is gone or not this Rpc's.
  void hold_view(const MsgBuffer& m, const char* what);
  void release_view(const MsgBuffer& m);
  // Every request buffer pair the engine takes passes here: a branch on two
  // loaded fields when neither is a view.
  void hold_views(const MsgBuffer& req, const MsgBuffer& resp) {
    if (req.is_app_view()) [[unlikely]]
      hold_view(req, "enqueue_request (request)");
    if (resp.is_app_view()) [[unlikely]]
      hold_view(resp, "enqueue_request (response buffer)");
  }
  void release_views(const MsgBuffer& req, const MsgBuffer& resp) {
    if (req.is_app_view()) [[unlikely]]
      release_view(req);
    if (resp.is_app_view()) [[unlikely]]
      release_view(resp);
  }
  // Frees the slot's handler-allocated response (a view: its headers, and
  // the engine lets go of the application's bytes) and gives back its
  // charge. Inline test: most responses are the slot's preallocated one.
  void free_dyn_resp(ServerSlot& slot) {
    if (slot.resp_budget_bytes != 0 || slot.dyn_resp.valid()) [[unlikely]]
      free_dyn_resp_slow(slot);
  }
  void free_dyn_resp_slow(ServerSlot& slot);
  AppRegion* own_app_region(const AppMemory& mem) const;
  void deregister_all_app_memory();
  // bg.cc
  void submit_background(Session& session, ServerSlot& slot, const HandlerEntry& entry);
  void poll_bg_responses();
  void finish_pending_handler(Session& session);

  friend struct RpcImplTestAccess;

  Rpc& owner_;
  NexusImpl& nexus_;
  RpcConfig config_;
  std::string transport_name_;
  std::unique_ptr<Transport> transport_;
  TransportCaps caps_;
  uint8_t transport_wire_id_ = 0;  // transport/registry.h
  RoutingInfo local_route_;
  std::unique_ptr<Allocator> allocator_;
  // alloc_msg_buffer (any thread) said that max_msg_buffer_bytes was reached.
  std::atomic<bool> msg_buffer_limit_logged_{false};
  const std::array<HandlerEntry, 256>* handlers_;
  size_t max_msg_size_ = 0;
  mutable RpcStats stats_;  // mutable: stats() folds in counters kept elsewhere
  uint64_t now_ns_ = 0;
  // CLOCK_MONOTONIC, through the time-stamp counter where it is invariant
  // (common/loop_clock.h); mutable: stats() reads the time.
  mutable LoopClock loop_clock_;
  // A test's manual clock (set_clock_for_testing); nullptr: loop_clock_,
  // read inline on the hot path.
  uint64_t (*test_clock_)() = nullptr;
  uint64_t read_clock() const {
    return test_clock_ == nullptr ? loop_clock_.now_ns() : test_clock_();
  }
  uint64_t rto_ns_ = 0;                // RpcConfig::rto_us: also how often the loss scan runs
  uint64_t session_rto_floor_ns_ = 0;  // and TransportCaps::min_rto_us: under each session's RTO
  uint64_t request_timeout_ns_ = 0;    // 0: requests never time out
  uint64_t partial_request_timeout_ns_ = 0;
  uint64_t next_request_seq_ = 1;  // RequestId: (session << 48) | seq (48 bits, never 0)
  // The last connect that failed, for connect() (session_api.cc).
  uint64_t connect_failures_ = 0;
  std::pair<SessionNum, SmErr> last_connect_failure_{kInvalidSessionNum, SmErr::kNone};
  SpawnedTasks spawned_;  // coroutines started by Rpc::spawn (coro.cc)
  bool shut_down_ = false;
  uint64_t last_loss_scan_ns_ = 0;
  // When the event loop last started, and how long before that the one
  // before it did (timely_sample_ns).
  uint64_t loop_start_ns_ = 0;
  uint64_t loop_gap_ns_ = 0;
  static constexpr uint64_t kLoopGapSlackNs = 20'000;
  std::thread::id owner_thread_;
  bool in_event_loop_ = false;         // the loop is not re-entrant
  uint32_t callbacks_running_ = 0;     // continuations and session callbacks running now
  bool flushed_outside_loop_ = false;  // flush_if_outside_loop since the loop last ran
  bool destroying_ = false;            // ~RpcImpl runs: no new requests or sessions

  // Receive budget (server): bytes held for requests being received or
  // handled, and for cached responses (docs/reliability.md, "Budgets").
  size_t rx_budget_per_session_bytes_ = 0;
  size_t rx_budget_per_host_bytes_ = 0;
  size_t rx_budget_per_rpc_bytes_ = 0;
  size_t rx_budget_used_bytes_ = 0;
  uint64_t rx_budget_refused_ns_ = 0;  // the last request refused for the per-Rpc budget
                                       // (stale partial requests may go: pkt_loss.cc), 0: none

  std::vector<std::unique_ptr<Session>> sessions_;  // index = SessionNum
  std::vector<SessionNum> free_session_nums_;
  size_t num_sessions_ = 0;
  size_t ring_reserved_ = 0;                    // RX ring entries the sessions' credits hold
  size_t ring_overcommit_ = 0;                  // credits of sessions beyond them
  mutable uint64_t rx_drops_refreshed_ns_ = 0;  // stats(): transport drops last read
  std::unordered_map<uint64_t, SessionNum> server_sessions_by_token_;
  // The remote hosts of server sessions, by IPv4 address: an entry lives
  // while the host has a session (Session::host points into it).
  std::unordered_map<uint32_t, RemoteHost> hosts_;
  size_t max_sessions_per_host_ = 0;
  std::unordered_set<uint64_t> tombstones_;  // tokens of ended server sessions
  std::deque<uint64_t> tombstone_fifo_;      // the same, oldest first

  // TX batch: items point into MsgBuffers or into ctrl_hdrs_. It holds
  // two default windows (64 credits), so a window leaves in one transport
  // call: at 32, an 8 MiB transfer over udp left in 32-packet sends and
  // the kernel's per-call cost held goodput back (docs/benchmarks.md).
  static constexpr size_t kTxBatch = 128;
  std::array<TxItem, kTxBatch> tx_batch_{};
  size_t tx_batch_size_ = 0;
  std::array<std::array<uint8_t, kPktHeaderBytes>, kTxBatch> ctrl_hdrs_{};
  size_t ctrl_hdr_next_ = 0;
  // The latest credit return still in the TX batch, and its session: a
  // later one for the same request replaces it (tx_credit_return).
  uint8_t* last_cr_hdr_ = nullptr;
  const Session* last_cr_session_ = nullptr;

  // RX burst.
  static constexpr size_t kRxBatch = 32;
  std::array<RxPacket, kRxBatch> rx_batch_{};

  // Client slots waiting for credits.
  std::vector<ClientSlot*> stall_queue_;
  // Congestion control (RpcConfig::congestion_control): the sessions'
  // shared Timely parameters and the wheel; wheel_ is null when off.
  TimelyParams timely_params_{.link_bytes_per_s = 0};
  std::unique_ptr<TimingWheel> wheel_;
  std::vector<uint64_t> wheel_due_;

  // One-sided reads in flight (bulk.cc). The local buffer of a read is the
  // transport's until the read completes; a reader that stops waiting
  // (request failed, session ended) orphans the read, and its completion
  // then frees the buffer (server) or runs the deferred continuation
  // (client). The cookie names the entry and its generation.
  struct BulkRead {
    uint32_t gen = 0;
    bool live = false;
    bool orphaned = false;
    bool server = false;
    SessionNum sn = kInvalidSessionNum;
    uint64_t req_num = 0;
    // An orphaned server read: the request buffer it fills, and the bytes
    // of the Rpc's receive budget that buffer holds until the read is done.
    MsgBuffer buf;
    size_t budget_bytes = 0;
    // An orphaned client read: the continuation it holds back.
    ContinuationFn cont;
    Completion completion{};
  };
  std::vector<BulkRead> bulk_reads_;
  std::vector<uint32_t> free_bulk_reads_;
  size_t bulk_reads_live_ = 0;

  // Fault injection.
  bool drop_enabled_ = false;
  uint64_t drop_threshold_ = 0;
  uint64_t rng_state_ = 0x9E3779B97F4A7C15ull;

  // Session-management deliveries from the Nexus thread.
  Mailbox<SmDelivery> sm_mailbox_;
  std::vector<SmDelivery> sm_local_;  // what the loop is handling (reused)
  std::atomic<uint64_t> sm_requests_dropped_{0};

  // Application memory (app_memory.cc), by AppRegion::index; entries are
  // reused (their gen moved on) but never freed before the Rpc. The mutex
  // guards what app_msg_buffer reads from background threads (taken only
  // when the Nexus has them); in_flight is the Rpc thread's alone.
  std::vector<std::unique_ptr<AppRegion>> app_regions_;
  std::vector<size_t> free_app_regions_;
  mutable std::mutex app_mutex_;
  bool app_locking_ = false;

  // Background handler responses.
  Mailbox<BgResponse> bg_mailbox_;
  std::vector<BgResponse> bg_local_;
  std::atomic<size_t> bg_inflight_{0};
  std::atomic<uint64_t> handler_exceptions_{0};
};

}  // namespace rpc::detail
