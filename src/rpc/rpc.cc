// Rpc construction and destruction, buffers, and the public API forwarding
// to RpcImpl.
#include <fmt/format.h>
#include <algorithm>

#include <thread>

#include "common/clock.h"
#include "common/log.h"
#include "nexus/nexus_impl.h"
#include "rpc/impl_access.h"
#include "rpc/rpc_impl.h"
#include "transport/registry.h"

namespace rpc {

Rpc::Rpc(Nexus& nexus, const RpcConfig& config)
    : impl_(std::make_unique<detail::RpcImpl>(*this, detail::impl_of(nexus), config)) {}
// The teardown runs while the Rpc is whole: continuations and coroutines
// it resumes may still call it (to free buffers, say).
Rpc::~Rpc() { impl_->shutdown(); }

Result<SessionNum> Rpc::create_session(const std::string& remote_uri, RpcId remote_rpc_id) {
  return impl_->create_session(remote_uri, remote_rpc_id);
}
Result<SessionNum> Rpc::connect(const std::string& remote_uri, RpcId remote_rpc_id,
                                std::chrono::milliseconds timeout) {
  return impl_->connect(remote_uri, remote_rpc_id, timeout);
}
Result<void> Rpc::destroy_session(SessionNum sn) { return impl_->destroy_session(sn); }
bool Rpc::is_connected(SessionNum sn) const { return impl_->is_connected(sn); }
const SessionStats* Rpc::session_stats(SessionNum sn) const { return impl_->session_stats(sn); }
size_t Rpc::num_active_sessions() const { return impl_->num_active_sessions(); }
MsgBuffer Rpc::alloc_msg_buffer(size_t max_size) noexcept {
  impl_->check_owner_or_background("alloc_msg_buffer");
  return impl_->alloc_msg_buffer(max_size);
}
void Rpc::free_msg_buffer(MsgBuffer& buf) noexcept {
  impl_->check_owner_or_background("free_msg_buffer");
  impl_->free_msg_buffer(buf);
}
Errc Rpc::enqueue_request(SessionNum sn, ReqType req_type, MsgBuffer& req, MsgBuffer& resp,
                          Continuation cont, void* tag) noexcept {
  return impl_->enqueue_request(sn, req_type, req, resp, cont, tag);
}
Errc Rpc::enqueue_request(SessionNum sn, ReqType req_type, MsgBuffer& req, MsgBuffer& resp,
                          ContinuationFn cont, const RequestOptions& options,
                          RequestId* id_out) noexcept {
  return impl_->enqueue_request(sn, req_type, req, resp, std::move(cont), options.timeout, id_out);
}
bool Rpc::cancel(RequestId id) noexcept { return impl_->cancel(id); }
void Rpc::enqueue_response(ReqHandle& handle, MsgBuffer& resp) noexcept {
  impl_->enqueue_response(handle, resp);
}
void Rpc::enqueue_error_response(ReqHandle& handle, uint32_t app_error) noexcept {
  MsgBuffer& pre_resp = handle.pre_resp_buffer();
  for (size_t i = 0; i < detail::kAppErrorBytes; i++) {
    pre_resp.data()[i] = static_cast<uint8_t>(app_error >> (8 * i));
  }
  pre_resp.resize(detail::kAppErrorBytes);
  impl_->enqueue_error_response(handle, pre_resp);
}
void Rpc::run_event_loop(std::chrono::microseconds duration) noexcept {
  impl_->run_event_loop(duration);
}
void Rpc::run_event_loop_once() noexcept { impl_->run_event_loop_once(); }
bool Rpc::in_event_loop() const noexcept { return impl_->in_event_loop(); }
RpcId Rpc::rpc_id() const { return impl_->rpc_id(); }
const RpcStats& Rpc::stats() const { return impl_->stats(); }
size_t Rpc::max_msg_size() const { return impl_->max_msg_size(); }
size_t Rpc::max_data_per_pkt() const { return impl_->max_data_per_pkt(); }
const std::string& Rpc::transport_name() const { return impl_->transport_name(); }
std::string Rpc::transport_provider() const { return impl_->transport().provider(); }

namespace detail {

RpcImpl::RpcImpl(Rpc& owner, NexusImpl& nexus, const RpcConfig& config)
    : owner_(owner), nexus_(nexus), config_(config) {
  if (config.rpc_id == kInvalidRpcId) throw Error("Rpc: rpc_id 255 is reserved");
  if (config.rto_us == 0) throw Error("Rpc: rto_us must be positive");
  if (config.drop_tx_fraction < 0.0 || config.drop_tx_fraction > 1.0) {
    throw Error("Rpc: drop_tx_fraction must be within [0, 1]");
  }
  if (config.max_sessions == 0 || config.max_sessions > kInvalidSessionNum) {
    throw Error(fmt::format("Rpc: max_sessions must be within [1, {}]", kInvalidSessionNum));
  }
  auto transport = make_transport(config, nexus.addr().ip_string());
  if (!transport) throw Error("Rpc: " + transport.error());
  transport_ = std::move(*transport);
  transport_name_ = transport_->name();
  transport_wire_id_ = transport_wire_id(transport_->name());
  caps_ = transport_->caps();
  if (config.session_credits < kMinConfiguredCredits ||
      config.session_credits > kMaxSessionCredits) {
    throw Error(fmt::format("Rpc: session_credits {} must be within [{}, {}]",
                            config.session_credits, kMinConfiguredCredits, kMaxSessionCredits));
  }
  if (caps_.rx_ring_size < config.session_credits) {
    throw Error(fmt::format("Rpc: rx_ring_size {} is below one session's credits ({})",
                            caps_.rx_ring_size, config.session_credits));
  }
  transport_->fill_local_routing_info(local_route_);
  max_msg_size_ = max_msg_size_for(caps_.max_data_per_pkt);
  rto_ns_ = config.rto_us * 1000;
  session_rto_floor_ns_ = std::max<uint64_t>(config.rto_us, caps_.min_rto_us) * 1000;
  request_timeout_ns_ = uint64_t{config.request_timeout_ms} * 1000000;
  partial_request_timeout_ns_ = uint64_t{config.partial_request_timeout_ms} * 1000000;
  if (partial_request_timeout_ns_ == 0)
    throw Error("Rpc: partial_request_timeout_ms must be positive");
  // Default: two of the largest messages, so that a window of them streams
  // (with one, the second of two 8 MiB requests was dropped at its first
  // packet and waited out an RTO), capped at the per-Rpc budget but never
  // below one.
  rx_budget_per_session_bytes_ =
      config.rx_budget_per_session_bytes != 0
          ? config.rx_budget_per_session_bytes
          : std::max(max_msg_size_, std::min(2 * max_msg_size_, config.rx_budget_per_rpc_bytes));
  rx_budget_per_rpc_bytes_ = config.rx_budget_per_rpc_bytes;
  if (rx_budget_per_rpc_bytes_ < rx_budget_per_session_bytes_) {
    // The default per-session budget is never below one largest message:
    // a smaller one would drop such requests for good, retransmitted until
    // their request timeout. Below that, the user must choose.
    throw Error(fmt::format(
        "Rpc: rx_budget_per_rpc_bytes ({}) is below the per-session budget ({} bytes{}); raise "
        "it, or set rx_budget_per_session_bytes too",
        rx_budget_per_rpc_bytes_, rx_budget_per_session_bytes_,
        config.rx_budget_per_session_bytes != 0
            ? ""
            : fmt::format(", by default 2 x max_msg_size() capped at the per-Rpc budget but "
                          "never below one message of max_msg_size(), {} bytes: a smaller one "
                          "would never take the largest requests",
                          max_msg_size_)));
  }
  // Default: half the Rpc's, so that one host (one client machine, or an
  // attacker) leaves the other half to everyone else.
  rx_budget_per_host_bytes_ =
      config.rx_budget_per_host_bytes != 0
          ? config.rx_budget_per_host_bytes
          : std::max(rx_budget_per_session_bytes_, rx_budget_per_rpc_bytes_ / 2);
  if (rx_budget_per_host_bytes_ < rx_budget_per_session_bytes_ ||
      rx_budget_per_host_bytes_ > rx_budget_per_rpc_bytes_) {
    throw Error(fmt::format(
        "Rpc: rx_budget_per_host_bytes ({}) must be within the per-session ({}) and per-Rpc ({}) "
        "budgets",
        rx_budget_per_host_bytes_, rx_budget_per_session_bytes_, rx_budget_per_rpc_bytes_));
  }
  max_sessions_per_host_ = config.max_sessions_per_host != 0
                               ? config.max_sessions_per_host
                               : std::max<size_t>(1, config.max_sessions / 2);
  if (max_sessions_per_host_ > config.max_sessions) {
    throw Error(fmt::format("Rpc: max_sessions_per_host ({}) is above max_sessions ({})",
                            max_sessions_per_host_, config.max_sessions));
  }
  if (config.max_msg_buffer_bytes < std::max(rx_budget_per_rpc_bytes_, Allocator::kChunkBytes)) {
    throw Error(fmt::format(
        "Rpc: max_msg_buffer_bytes ({}) must be at least rx_budget_per_rpc_bytes ({}) and 2 MiB",
        config.max_msg_buffer_bytes, rx_budget_per_rpc_bytes_));
  }
  if (config.congestion_control && !caps_.congestion_free) {
    if (!(config.cc_link_gbps >= 0.1 && config.cc_link_gbps <= 10000)) {
      throw Error("Rpc: cc_link_gbps must be within [0.1, 10000]");
    }
    // eRPC's steps (a minimum of 15 MB/s, additive steps of 5 MB/s) are
    // for a 40 Gbit/s link; they scale with the link here, so that a
    // slower one (or a bottleneck of a few hundred Mbit/s) is not
    // overrun by sessions that cannot slow down further.
    const double link = config.cc_link_gbps * 1e9 / 8;
    timely_params_.link_bytes_per_s = link;
    // Twice the server's trickle floor for each request a session may have
    // in flight, so that a paced request is not dropped as a trickle
    // (kMinRxBytesPerSec).
    timely_params_.min_bytes_per_s =
        std::max(link * 0.003, 2.0 * kSessionReqWindow * kMinRxBytesPerSec);
    timely_params_.add_bytes_per_s = link * 0.001;
    // Thresholds above each session's base RTT (TimelyParams::relative_to_base).
    timely_params_.relative_to_base = true;
    timely_params_.t_low_ns = uint64_t{config.cc_t_low_us} * 1000;
    timely_params_.t_high_ns = uint64_t{config.cc_t_high_us} * 1000;
    if (timely_params_.t_low_ns >= timely_params_.t_high_ns) {
      throw Error("Rpc: cc_t_low_us must be below cc_t_high_us");
    }
    // 1 us slots over at least one packet's time at the minimum rate (a
    // paced session waits at most that for its next packet), at most 64 ms:
    // an entry beyond the horizon comes up early and is put back.
    const double min_rate_pkt_ns =
        static_cast<double>(caps_.max_pkt_bytes) * 1e9 / timely_params_.min_bytes_per_s;
    const size_t wheel_slots =
        std::clamp<size_t>(static_cast<size_t>(min_rate_pkt_ns / 1000) + 2, 1024, 65536);
    wheel_ = std::make_unique<TimingWheel>(1000, wheel_slots, read_clock());
  }
  drop_enabled_ = config.drop_tx_fraction > 0.0;
  // 2^64 * fraction, saturated: 1.0 itself does not fit a uint64_t (and
  // converting it was undefined; it came out as "drop nothing").
  drop_threshold_ = config.drop_tx_fraction >= 1.0
                        ? UINT64_MAX
                        : static_cast<uint64_t>(config.drop_tx_fraction * 18446744073709551616.0);
  rng_state_ ^= (static_cast<uint64_t>(config.rpc_id) << 32) ^ now_ns();
  Transport* t = transport_.get();
  // Freed large regions (above one chunk) go back to the system, but two
  // buffers of the largest message stay mapped and registered: mapping,
  // registering and faulting in megabytes per request would cost 30-75 ms
  // each here (measured), while the receive budget already bounds what a
  // peer can make us allocate. Counted in the regions such buffers take
  // (16 MiB for a 16 MiB - 1 message plus its packet headers): counted in
  // message bytes, one of two in flight was unmapped and faulted in afresh
  // for every 8 MiB request.
  const size_t largest_buffer_bytes = Allocator::footprint_bytes(
      MsgBufferAccess::alloc_bytes(max_msg_size_, caps_.max_data_per_pkt));
  allocator_ = std::make_unique<Allocator>(
      [t](void* addr, size_t len) { return t->register_memory(addr, len); },
      [t](const MemReg& reg) { t->deregister_memory(reg); }, nexus.num_bg_threads() > 0,
      2 * largest_buffer_bytes, config.max_msg_buffer_bytes);
  app_locking_ = nexus.num_bg_threads() > 0;
  handlers_ = &nexus.freeze_handlers();
  stall_queue_.reserve(64);
  auto registered = nexus_.register_rpc(config.rpc_id, this);
  if (!registered) throw Error("Rpc: " + registered.error());
  owner_thread_ = std::this_thread::get_id();
  now_ns_ = read_clock();
  last_loss_scan_ns_ = now_ns_;
}

// Every accepted request's continuation runs exactly once, here if not
// before; peers are told; nothing is sent from a freed session.
RpcImpl::~RpcImpl() { shutdown(); }

void RpcImpl::shutdown() {
  if (shut_down_) return;
  RPC_CHECK_USAGE(!in_loop_or_callback(),
                  "Rpc {} destroyed from inside its own event loop (a continuation, handler or "
                  "session callback)",
                  config_.rpc_id);
  RPC_CHECK_OWNER("~Rpc");
  // No more SM deliveries once unregistered.
  nexus_.unregister_rpc(config_.rpc_id);
  // Background handlers hold pointers into our sessions.
  while (bg_inflight_.load(std::memory_order_acquire) != 0) std::this_thread::yield();
  // Packets queued since the last loop iteration point into request
  // buffers that the continuations below hand back to the application.
  tx_flush();
  destroying_ = true;  // continuations below can start nothing new
  // Answers that reached us before we unregistered: a connect accepted by
  // its server must be disconnected like any connected session below.
  if (sm_mailbox_.pending()) poll_sm_queue();
  // Nothing below frees a session until every continuation has run and
  // every coroutine is gone: a coroutine handler resumed by a late
  // continuation names its handle, which lives in its server session.
  // By index: nothing below adds sessions.
  for (size_t sn = 0; sn < sessions_.size(); sn++) {
    Session* s = sessions_[sn].get();
    if (s == nullptr) continue;
    if (!s->is_client()) {
      if (s->is_connected()) send_session_reset(*s);
      // Its requests being read run no handler now: orphaned, like those
      // of the client sessions' responses below, and drained with them.
      for (ServerSlot& slot : s->sslots) {
        if (slot.bulk_read != kNoBulkRead) orphan_server_read(slot);
      }
      continue;
    }
    switch (s->state) {
      case SessionState::kConnected:
        disconnect_client_session(*s);
        break;
      case SessionState::kConnecting:
        set_state(*s, SessionState::kDisconnecting);
        fail_client_requests(*s, Errc::kSessionDestroyed);
        nexus_.sm_abandon_connect(s->sm_token);  // the Nexus disconnects if it was accepted
        break;
      case SessionState::kConnectingDoomed:
        nexus_.sm_abandon_connect(s->sm_token);
        break;
      default:
        break;
    }
  }
  tx_flush();
  // Every read is orphaned now; the continuations they held back run as
  // they end, while every session is still there.
  drain_bulk_reads();
  // Every continuation has run, resuming the coroutines that awaited
  // calls; those still suspended wait for nothing that will come, and
  // their frames may name handles too.
  spawned_.destroy_all();
  for (auto& s : sessions_) {
    if (s != nullptr) free_session(*s);
  }
  deregister_all_app_memory();
  shut_down_ = true;
}

MsgBuffer RpcImpl::alloc_msg_buffer(size_t max_size) noexcept {
  if (max_size > max_msg_size_) return MsgBuffer();
  const size_t bytes = MsgBufferAccess::alloc_bytes(max_size, caps_.max_data_per_pkt);
  const Allocation a = allocator_->alloc(bytes);
  if (a.buf == nullptr) [[unlikely]] {
    if (allocator_->limit_failures() != 0 &&
        !msg_buffer_limit_logged_.exchange(true, std::memory_order_relaxed)) {
      RPC_LOG_ERROR(
          "Rpc {}: a message buffer of {} bytes would take the Rpc past "
          "RpcConfig::max_msg_buffer_bytes ({} bytes of registered memory); alloc_msg_buffer "
          "returns invalid buffers, and requests the Rpc has no buffer for are dropped, until "
          "buffers are freed. Raise max_msg_buffer_bytes if this Rpc needs more (counted in "
          "RpcStats::msg_buffer_allocs_over_limit; logged once)",
          config_.rpc_id, max_size, config_.max_msg_buffer_bytes);
    }
    return MsgBuffer();
  }
  return MsgBufferAccess::make(a, max_size, caps_.max_data_per_pkt);
}

void RpcImpl::free_msg_buffer(MsgBuffer& buf) noexcept {
  if (!buf.valid() || MsgBufferAccess::region(buf) == nullptr) return;
  allocator_->free(MsgBufferAccess::allocation_of(buf));
  MsgBufferAccess::invalidate(buf);
}

// Any thread when the Nexus has background threads: the allocator and the
// registration table then take a lock (a background handle may be answered
// from any thread); else the Rpc's thread only.
void RpcImpl::check_owner_or_background([[maybe_unused]] const char* what) const noexcept {
#ifndef NDEBUG
  RPC_CHECK_USAGE(std::this_thread::get_id() == owner_thread_ || nexus_.num_bg_threads() > 0,
                  "Rpc {}: {} called from a thread that does not own the Rpc, and its Nexus has "
                  "no background threads (NexusConfig::num_bg_threads), without which it is not "
                  "thread-safe (an Rpc belongs to the thread that created it)",
                  config_.rpc_id, what);
#endif
}

bool RpcImpl::is_connected(SessionNum sn) const {
  RPC_CHECK_OWNER("is_connected");
  return sn < sessions_.size() && sessions_[sn] != nullptr && sessions_[sn]->is_connected();
}

const SessionStats* RpcImpl::session_stats(SessionNum sn) const {
  RPC_CHECK_OWNER("session_stats");
  if (sn >= sessions_.size() || sessions_[sn] == nullptr) return nullptr;
  Session& s = *sessions_[sn];
  // Derived when asked, not per sample: the divisions cost every RPC.
  if (s.rtt.has_sample()) {
    s.stats.srtt_us = s.rtt.srtt_ns() / 1000;
    s.stats.rto_us = s.rtt.rto_ns() / 1000;
  }
  if (wheel_ != nullptr && s.is_client()) {
    s.stats.cc_rate_mbps = static_cast<uint64_t>(s.timely.rate_bytes_per_s() * 8 / 1e6);
  }
  return &s.stats;
}

size_t RpcImpl::num_active_sessions() const {
  RPC_CHECK_OWNER("num_active_sessions");
  return num_sessions_;
}

}  // namespace detail
}  // namespace rpc
