#include "nexus/sm_thread.h"

#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <map>
#include <utility>

#include <asio.hpp>

#include "common/log.h"
#include "librpc/error.h"
#include "nexus/nexus_impl.h"
#include "nexus/remote_watch.h"

namespace rpc::detail {

namespace {

using Clock = std::chrono::steady_clock;

// The session-management socket's receive buffer (see the constructor).
constexpr int kSmRxBufferBytes = 4 << 20;

asio::ip::udp::endpoint to_endpoint(const NetAddr& a) {
  return {asio::ip::address_v4(a.ipv4), a.port};
}

NetAddr from_endpoint(const asio::ip::udp::endpoint& e) {
  NetAddr a;
  if (e.address().is_v4()) a.ipv4 = e.address().to_v4().to_uint();
  a.port = e.port();
  return a;
}

// A request to an Rpc that no Rpc could accept, whoever sent it: refused
// here so that it neither reaches an Rpc's queue nor proves its sender alive.
bool request_plausible(const SmMsg& m) {
  switch (m.type) {
    case SmMsgType::kConnectReq:
      // The server needs the client's routing info and session number.
      return m.routing_len != 0 && m.client_session_num != kInvalidSessionNum &&
             m.client_rpc_id != kInvalidRpcId;
    case SmMsgType::kDisconnectReq:
    case SmMsgType::kSessionResetReq:
      // Both name a session that exists at both ends.
      return m.client_session_num != kInvalidSessionNum &&
             m.server_session_num != kInvalidSessionNum && m.client_rpc_id != kInvalidRpcId &&
             m.server_rpc_id != kInvalidRpcId;
    default:
      return true;
  }
}

// The response the SM thread itself sends for a request: refusals, timeouts.
SmMsg response_to(const SmMsg& req, SmErr err) {
  SmMsg resp = req;
  resp.type = sm_response_type(req.type);
  resp.err = err;
  resp.routing_len = 0;
  resp.routing = {};
  resp.max_data_per_pkt = 0;
  return resp;
}

}  // namespace

// Everything the io_context thread touches. Pending requests are only
// accessed on that thread (callers post to it).
struct SmThread::State {
  struct Pending {
    SmMsg msg;
    NetAddr to;
    Clock::time_point next_retry;
    Clock::time_point deadline;
    // The response and the timeout are the SM thread's: no Rpc waits for them.
    bool owned = false;
    // The connect's Rpc is gone: a successful answer is disconnected from here.
    bool abandoned = false;
  };
  // Requests by (token, type): one token can have a disconnect and a
  // session reset in flight at once (client and server Rpc in one Nexus).
  using PendingKey = std::pair<uint64_t, SmMsgType>;

  NexusImpl& nexus;
  SmThreadConfig config;
  std::chrono::milliseconds retry;
  std::chrono::milliseconds timeout;
  std::chrono::milliseconds heartbeat_interval;
  asio::io_context io;
  asio::ip::udp::socket socket{io};
  asio::steady_timer timer{io};
  asio::steady_timer heartbeat_timer{io};
  std::array<uint8_t, 2048> rx_buf{};
  asio::ip::udp::endpoint rx_from;
  std::map<PendingKey, Pending> pending;
  // Connects that timed out, remembered for a while (10 timeouts, at least
  // 10 s): a server that accepted one late would otherwise keep a session
  // nobody ends. Bounded in number.
  struct TimedOutConnect {
    SmMsg msg;
    NetAddr to;
    Clock::time_point forget_at;
  };
  static constexpr size_t kMaxTimedOutConnects = 4096;
  std::map<uint64_t, TimedOutConnect> timed_out_connects;  // by token
  SmThreadStats stats;
  RemoteWatch remotes;
  // Set on the io thread at shutdown: handlers already queued must not
  // re-arm the timer or the receive, or io.run() would never return.
  bool stopping = false;

  State(NexusImpl& n, const SmThreadConfig& c)
      : nexus(n),
        config(c),
        retry(c.retry_ms),
        timeout(c.timeout_ms),
        heartbeat_interval(c.heartbeat_interval_ms),
        remotes(
            stats, [this](const SmMsg& m, const NetAddr& to) { send_now(m, to); },
            [&n](const NetAddr& addr, uint64_t incarnation) {
              n.broadcast_remote_failure(addr, incarnation);
            },
            RemoteWatch::Timing{retry, timeout, std::chrono::milliseconds(c.failure_timeout_ms)}) {}

  void send_now(const SmMsg& msg, const NetAddr& to) {
    std::array<uint8_t, kSmMsgBytes> bytes{};
    SmMsg stamped = msg;
    stamped.incarnation = config.incarnation;
    encode_sm_msg(stamped, bytes);
    asio::error_code ec;
    socket.send_to(asio::buffer(bytes), to_endpoint(to), 0, ec);
    if (ec) RPC_LOG_DEBUG("sm send to {} failed: {}", to.to_string(), ec.message());
  }

  void start_receive() {
    socket.async_receive_from(asio::buffer(rx_buf), rx_from,
                              [this](const asio::error_code& ec, size_t len) {
                                if (stopping || ec == asio::error::operation_aborted) return;
                                if (!ec) on_datagram(len);
                                start_receive();
                              });
  }

  void start_timer() {
    timer.expires_after(retry);
    timer.async_wait([this](const asio::error_code& ec) {
      if (ec || stopping) return;
      on_tick();
      start_timer();
    });
  }

  void start_heartbeat_timer() {
    heartbeat_timer.expires_after(heartbeat_interval);
    heartbeat_timer.async_wait([this](const asio::error_code& ec) {
      if (ec || stopping) return;
      remotes.on_heartbeat_tick();
      start_heartbeat_timer();
    });
  }

  void add_pending(const SmMsg& msg, const NetAddr& to, bool owned) {
    const auto now = Clock::now();
    pending[{msg.token, msg.type}] = Pending{msg, to, now + retry, now + timeout, owned, false};
    send_now(msg, to);
  }

  void on_datagram(size_t len) {
    stats.rx_msgs++;
    const NetAddr from = from_endpoint(rx_from);
    SmMsg msg;
    const SmDecodeStatus status = decode_sm_msg({rx_buf.data(), len}, msg);
    if (status == SmDecodeStatus::kVersionMismatch) {
      refuse_other_version(msg, from);
      return;
    }
    if (status != SmDecodeStatus::kOk) {
      stats.rx_dropped++;
      RPC_LOG_DEBUG("sm message from {} dropped: {}", from.to_string(), to_string(status));
      return;
    }
    // Every Nexus stamps a nonzero incarnation. A remote known only by
    // incarnation 0 is never declared failed, so a forged connect carrying
    // it would hold a session (and its buffers) forever.
    if (msg.incarnation == 0) {
      stats.rx_dropped++;
      return;
    }
    if (msg.is_request() && !request_plausible(msg)) {
      stats.rx_rejected++;
      RPC_LOG_DEBUG("sm request from {} rejected: fields no Rpc could accept", from.to_string());
      return;
    }
    // The probe's answer is the judge of incarnations, not a trigger.
    if (msg.type == SmMsgType::kProbeResp) return remotes.on_probe_resp(msg, from);
    remotes.on_message(from, msg.incarnation);
    // A request claiming another incarnation of a process we know at that
    // address waits for the probe just started: a forger could otherwise
    // build sessions bound to an incarnation no failure notice ever names.
    // The real, restarted process retransmits and gets through once the
    // probe confirms it.
    if (msg.is_request() && msg.type != SmMsgType::kProbeReq &&
        remotes.disputed(from, msg.incarnation)) {
      stats.rx_disputed++;
      return;
    }
    switch (msg.type) {
      case SmMsgType::kHeartbeat:
        return;
      case SmMsgType::kProbeReq:
        stats.probes_answered++;
        return send_now(response_to(msg, SmErr::kNone), from);
      case SmMsgType::kConnectReq:
      case SmMsgType::kDisconnectReq:
        return deliver_request(msg.server_rpc_id, msg, from);
      case SmMsgType::kSessionResetReq:
        return deliver_request(msg.client_rpc_id, msg, from);
      default:
        return on_response(msg, from);
    }
  }

  void deliver_request(RpcId to_rpc, const SmMsg& msg, const NetAddr& from) {
    if (!nexus.deliver_to_rpc(to_rpc, msg, from)) {
      send_now(response_to(msg, SmErr::kUnknownRpcId), from);
    }
  }

  // A request of another version: answer with a response of this version
  // that carries the refusal, so the peer fails fast instead of timing out.
  // A response of another version (such a refusal, in the peer's version)
  // fails the request it answers the same way.
  void refuse_other_version(const SmMsg& partial, const NetAddr& from) {
    if (partial.is_response()) return fail_other_version(partial, from);
    if (partial.type != SmMsgType::kConnectReq && partial.type != SmMsgType::kDisconnectReq &&
        partial.type != SmMsgType::kSessionResetReq) {
      stats.rx_dropped++;
      return;
    }
    SmMsg resp;
    resp.type = sm_response_type(partial.type);
    resp.err = SmErr::kVersionMismatch;
    resp.token = partial.token;
    send_now(resp, from);
  }

  // Only the envelope of `partial` is known: its type and token. Sent by the
  // address we asked, with our token, it can only be the peer's refusal.
  void fail_other_version(const SmMsg& partial, const NetAddr& from) {
    auto it = pending.find({partial.token, request_type_of(partial.type)});
    if (it == pending.end() || !(it->second.to == from)) {
      stats.rx_dropped++;
      return;
    }
    const Pending p = it->second;
    pending.erase(it);
    if (p.owned || p.abandoned) return;
    nexus.deliver_to_rpc(p.msg.client_rpc_id, response_to(p.msg, SmErr::kVersionMismatch), from);
  }

  void on_response(const SmMsg& msg, const NetAddr& from) {
    auto it = pending.find({msg.token, request_type_of(msg.type)});
    if (it == pending.end() && msg.type == SmMsgType::kConnectResp) {
      return on_late_connect_resp(msg, from);
    }
    // Only the peer we asked may answer, with the matching type: anything
    // else is a late duplicate or a forgery.
    if (it == pending.end() || !(it->second.to == from) ||
        msg.client_rpc_id != it->second.msg.client_rpc_id ||
        msg.client_session_num != it->second.msg.client_session_num) {
      stats.rx_dropped++;
      return;
    }
    const Pending p = it->second;
    pending.erase(it);
    if (p.owned) return;
    if (!p.abandoned && nexus.deliver_to_rpc(msg.client_rpc_id, msg, from)) return;
    // The Rpc that asked is gone. A session the server built for it would
    // live until this process dies: end it from here.
    if (msg.type == SmMsgType::kConnectResp && msg.err == SmErr::kNone)
      disconnect_orphan(msg, from);
  }

  static SmMsgType request_type_of(SmMsgType response) {
    switch (response) {
      case SmMsgType::kConnectResp:
        return SmMsgType::kConnectReq;
      case SmMsgType::kDisconnectResp:
        return SmMsgType::kDisconnectReq;
      case SmMsgType::kSessionResetResp:
        return SmMsgType::kSessionResetReq;
      default:
        return SmMsgType::kHeartbeat;  // matches no pending request
    }
  }

  void disconnect_orphan(const SmMsg& connect_resp, const NetAddr& server) {
    SmMsg m;
    m.type = SmMsgType::kDisconnectReq;
    m.transport = connect_resp.transport;
    m.client_rpc_id = connect_resp.client_rpc_id;
    m.server_rpc_id = connect_resp.server_rpc_id;
    m.client_session_num = connect_resp.client_session_num;
    m.server_session_num = connect_resp.server_session_num;
    m.token = connect_resp.token;
    stats.orphan_disconnects_sent++;
    add_pending(m, server, /*owned=*/true);
  }

  // A connect answered after it timed out: if the server accepted it, the
  // Rpc has already failed the session, so the server's end is ended here.
  void on_late_connect_resp(const SmMsg& msg, const NetAddr& from) {
    auto it = timed_out_connects.find(msg.token);
    if (it == timed_out_connects.end() || !(it->second.to == from) ||
        msg.client_rpc_id != it->second.msg.client_rpc_id ||
        msg.client_session_num != it->second.msg.client_session_num) {
      stats.rx_dropped++;
      return;
    }
    timed_out_connects.erase(it);
    if (msg.err == SmErr::kNone) disconnect_orphan(msg, from);
  }

  void remember_timed_out_connect(const Pending& p, Clock::time_point now) {
    if (p.msg.type != SmMsgType::kConnectReq) return;
    if (timed_out_connects.size() >= kMaxTimedOutConnects) {
      timed_out_connects.erase(timed_out_connects.begin());
    }
    // Long enough for a server that was merely slow (descheduled, its loop
    // busy), bounded by count above.
    const auto remember_for = std::max<Clock::duration>(10 * timeout, std::chrono::seconds(10));
    timed_out_connects[p.msg.token] = TimedOutConnect{p.msg, p.to, now + remember_for};
  }

  void abandon_connect(uint64_t token) {
    auto it = pending.find({token, SmMsgType::kConnectReq});
    if (it != pending.end()) it->second.abandoned = true;
  }

  void on_tick() {
    const auto now = Clock::now();
    for (auto it = pending.begin(); it != pending.end();) {
      Pending& p = it->second;
      if (now >= p.deadline) {
        stats.timeouts++;
        const SmMsg resp = response_to(p.msg, SmErr::kTimeout);
        const NetAddr to = p.to;
        const bool deliver = !p.owned && !p.abandoned;
        remember_timed_out_connect(p, now);
        it = pending.erase(it);
        if (deliver) nexus.deliver_to_rpc(resp.client_rpc_id, resp, to);
        continue;
      }
      if (now >= p.next_retry) {
        stats.retransmissions++;
        send_now(p.msg, p.to);
        p.next_retry = now + retry;
      }
      ++it;
    }
    std::erase_if(timed_out_connects, [&](const auto& e) { return now >= e.second.forget_at; });
    remotes.on_retry_tick();
  }
};

SmThread::SmThread(NexusImpl& nexus, const NetAddr& addr, const SmThreadConfig& config)
    : state_(std::make_unique<State>(nexus, config)) {
  asio::error_code ec;
  state_->socket.open(asio::ip::udp::v4(), ec);
  if (ec) throw Error("cannot open the session-management socket", ec.value());
  state_->socket.bind(to_endpoint(addr), ec);
  // rpc::Error appends the errno text itself.
  if (ec) {
    throw Error("cannot bind the session-management socket to " + addr.to_string(), ec.value());
  }
  // A client opening thousands of sessions sends hundreds of connect
  // requests at once; the kernel's default receive buffer (about 200 KB,
  // some 270 SM datagrams with their bookkeeping) dropped part of such a
  // burst, and each dropped request waited sm_retry_ms for its resend.
  // SO_RCVBUFFORCE passes net.core.rmem_max where we may (root).
  const int rx_bytes = kSmRxBufferBytes;
  const int fd = state_->socket.native_handle();
  if (::setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rx_bytes, sizeof(rx_bytes)) != 0) {
    (void)::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rx_bytes, sizeof(rx_bytes));
  }
  state_->start_receive();
  state_->start_timer();
  state_->start_heartbeat_timer();
  thread_ = std::thread([this] { state_->io.run(); });
}

SmThread::~SmThread() {
  asio::post(state_->io, [this] {
    state_->stopping = true;
    state_->timer.cancel();
    state_->heartbeat_timer.cancel();
    asio::error_code ec;
    state_->socket.close(ec);
    state_->io.stop();
  });
  thread_.join();
}

uint16_t SmThread::bound_port() const { return state_->socket.local_endpoint().port(); }

void SmThread::send_request(const SmMsg& msg, const NetAddr& to) {
  asio::post(state_->io, [this, msg, to] { state_->add_pending(msg, to, /*owned=*/false); });
}

void SmThread::send_owned_request(const SmMsg& msg, const NetAddr& to) {
  asio::post(state_->io, [this, msg, to] {
    if (msg.type == SmMsgType::kSessionResetReq) state_->stats.session_resets_sent++;
    state_->add_pending(msg, to, /*owned=*/true);
  });
}

void SmThread::send_response(const SmMsg& msg, const NetAddr& to) {
  asio::post(state_->io, [this, msg, to] { state_->send_now(msg, to); });
}

void SmThread::abandon_connect(uint64_t token) {
  asio::post(state_->io, [this, token] { state_->abandon_connect(token); });
}

const SmThreadStats& SmThread::stats() const { return state_->stats; }

NexusStats SmThreadStats::snapshot() const {
  constexpr auto kRelaxed = std::memory_order_relaxed;
  NexusStats s;
  s.rx_msgs = rx_msgs.load(kRelaxed);
  s.rx_dropped = rx_dropped.load(kRelaxed);
  s.rx_rejected = rx_rejected.load(kRelaxed);
  s.retransmissions = retransmissions.load(kRelaxed);
  s.timeouts = timeouts.load(kRelaxed);
  s.heartbeats_sent = heartbeats_sent.load(kRelaxed);
  s.remote_failures = remote_failures.load(kRelaxed);
  s.probes_sent = probes_sent.load(kRelaxed);
  s.probes_answered = probes_answered.load(kRelaxed);
  s.probe_timeouts = probe_timeouts.load(kRelaxed);
  s.incarnation_forgeries = incarnation_forgeries.load(kRelaxed);
  s.probe_resp_dropped = probe_resp_dropped.load(kRelaxed);
  s.rx_disputed = rx_disputed.load(kRelaxed);
  s.session_resets_sent = session_resets_sent.load(kRelaxed);
  s.orphan_disconnects_sent = orphan_disconnects_sent.load(kRelaxed);
  return s;
}

void SmThread::add_remote(const NetAddr& remote, uint64_t incarnation) {
  asio::post(state_->io, [this, remote, incarnation] { state_->remotes.add(remote, incarnation); });
}

void SmThread::release_remote(const NetAddr& remote) {
  asio::post(state_->io, [this, remote] { state_->remotes.release(remote); });
}

}  // namespace rpc::detail
