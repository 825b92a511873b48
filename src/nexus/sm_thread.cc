#include "nexus/sm_thread.h"

#include <array>
#include <chrono>
#include <unordered_map>

#include <asio.hpp>

#include "common/log.h"
#include "nexus/nexus_impl.h"
#include "rpc/error.h"

namespace rpc::detail {

namespace {

using Clock = std::chrono::steady_clock;

asio::ip::udp::endpoint to_endpoint(const NetAddr& a) {
  return {asio::ip::address_v4(a.ipv4), a.port};
}

NetAddr from_endpoint(const asio::ip::udp::endpoint& e) {
  NetAddr a;
  if (e.address().is_v4()) a.ipv4 = e.address().to_v4().to_uint();
  a.port = e.port();
  return a;
}

SmMsgType response_type_of(SmMsgType request) {
  return request == SmMsgType::kConnectReq ? SmMsgType::kConnectResp : SmMsgType::kDisconnectResp;
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
  };

  // A remote Nexus that sessions refer to.
  struct Remote {
    NetAddr addr;
    size_t refs = 0;
    uint64_t incarnation = 0;  // 0 until heard from
    Clock::time_point last_heard;
  };

  NexusImpl& nexus;
  SmThreadConfig config;
  std::chrono::milliseconds retry;
  std::chrono::milliseconds timeout;
  std::chrono::milliseconds heartbeat_interval;
  std::chrono::milliseconds failure_timeout;
  asio::io_context io;
  asio::ip::udp::socket socket{io};
  asio::steady_timer timer{io};
  asio::steady_timer heartbeat_timer{io};
  std::unordered_map<uint64_t, Remote> remotes;  // by NetAddr::key()
  std::array<uint8_t, 2048> rx_buf{};
  asio::ip::udp::endpoint rx_from;
  std::unordered_map<uint64_t, Pending> pending;  // by token
  SmThreadStats stats;
  // Set on the io thread at shutdown: handlers already queued must not
  // re-arm the timer or the receive, or io.run() would never return.
  bool stopping = false;

  State(NexusImpl& n, const SmThreadConfig& c)
      : nexus(n),
        config(c),
        retry(c.retry_ms),
        timeout(c.timeout_ms),
        heartbeat_interval(c.heartbeat_interval_ms),
        failure_timeout(c.failure_timeout_ms) {}

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
      on_heartbeat_tick();
      start_heartbeat_timer();
    });
  }

  // Every remote still referred to gets a heartbeat; one silent for the
  // failure timeout is declared failed (once: it must be heard again, with
  // any incarnation, before it can fail again).
  void on_heartbeat_tick() {
    const auto now = Clock::now();
    SmMsg hb;
    hb.type = SmMsgType::kHeartbeat;
    for (auto& [key, r] : remotes) {
      if (r.incarnation != 0 && now - r.last_heard > failure_timeout) {
        declare_failed(r);
        continue;
      }
      send_now(hb, r.addr);
      stats.heartbeats_sent++;
    }
  }

  void declare_failed(Remote& r) {
    stats.remote_failures++;
    RPC_LOG_INFO("remote Nexus {} (incarnation {:x}) failed", r.addr.to_string(), r.incarnation);
    nexus.broadcast_remote_failure(r.addr, r.incarnation);
    r.incarnation = 0;
    r.last_heard = Clock::now();
  }

  // Any valid message proves the sender alive; a new incarnation from the
  // same address means the old process is gone.
  void note_alive(const NetAddr& from, uint64_t incarnation) {
    auto it = remotes.find(from.key());
    if (it == remotes.end()) return;
    Remote& r = it->second;
    if (r.incarnation != 0 && r.incarnation != incarnation) declare_failed(r);
    r.incarnation = incarnation;
    r.last_heard = Clock::now();
  }

  void add_remote(const NetAddr& addr, uint64_t incarnation) {
    Remote& r = remotes[addr.key()];
    if (r.refs++ == 0) {
      r.addr = addr;
      r.last_heard = Clock::now();
    }
    // A server learns its client's incarnation from the connect request,
    // before any heartbeat: a client killed right away must still fail.
    if (r.incarnation == 0) r.incarnation = incarnation;
  }

  void release_remote(const NetAddr& addr) {
    auto it = remotes.find(addr.key());
    if (it != remotes.end() && --it->second.refs == 0) remotes.erase(it);
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
    note_alive(from, msg.incarnation);
    if (msg.type == SmMsgType::kHeartbeat) return;
    if (msg.is_request()) {
      if (!nexus.deliver_to_rpc(msg.server_rpc_id, msg, from)) {
        SmMsg resp = msg;
        resp.type = response_type_of(msg.type);
        resp.err = SmErr::kUnknownRpcId;
        resp.routing_len = 0;
        resp.routing = {};
        send_now(resp, from);
      }
      return;
    }
    on_response(msg, from);
  }

  // A request of another version: answer with a v1 response that carries
  // the refusal, so the peer fails fast instead of timing out.
  void refuse_other_version(const SmMsg& partial, const NetAddr& from) {
    if (partial.type != SmMsgType::kConnectReq && partial.type != SmMsgType::kDisconnectReq) {
      stats.rx_dropped++;
      return;
    }
    SmMsg resp;
    resp.type = response_type_of(partial.type);
    resp.err = SmErr::kVersionMismatch;
    resp.token = partial.token;
    send_now(resp, from);
  }

  void on_response(const SmMsg& msg, const NetAddr& from) {
    auto it = pending.find(msg.token);
    // Only the peer we asked may answer, with the matching type: anything
    // else is a late duplicate or a forgery.
    if (it == pending.end() || !(it->second.to == from) ||
        msg.type != response_type_of(it->second.msg.type) ||
        msg.client_rpc_id != it->second.msg.client_rpc_id ||
        msg.client_session_num != it->second.msg.client_session_num) {
      stats.rx_dropped++;
      return;
    }
    pending.erase(it);
    nexus.deliver_to_rpc(msg.client_rpc_id, msg, from);
  }

  void on_tick() {
    const auto now = Clock::now();
    for (auto it = pending.begin(); it != pending.end();) {
      Pending& p = it->second;
      if (now >= p.deadline) {
        stats.timeouts++;
        SmMsg resp = p.msg;
        resp.type = response_type_of(p.msg.type);
        resp.err = SmErr::kTimeout;
        resp.routing_len = 0;
        resp.routing = {};
        const NetAddr to = p.to;
        it = pending.erase(it);
        nexus.deliver_to_rpc(resp.client_rpc_id, resp, to);
        continue;
      }
      if (now >= p.next_retry) {
        stats.retransmissions++;
        send_now(p.msg, p.to);
        p.next_retry = now + retry;
      }
      ++it;
    }
  }
};

SmThread::SmThread(NexusImpl& nexus, const NetAddr& addr, const SmThreadConfig& config)
    : state_(std::make_unique<State>(nexus, config)) {
  asio::error_code ec;
  state_->socket.open(asio::ip::udp::v4(), ec);
  if (!ec) state_->socket.bind(to_endpoint(addr), ec);
  if (ec) {
    throw Error(
        "cannot bind the session-management socket to " + addr.to_string() + ": " + ec.message(),
        ec.value());
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
  asio::post(state_->io, [this, msg, to] {
    const auto now = Clock::now();
    state_->pending[msg.token] =
        State::Pending{msg, to, now + state_->retry, now + state_->timeout};
    state_->send_now(msg, to);
  });
}

void SmThread::send_response(const SmMsg& msg, const NetAddr& to) {
  asio::post(state_->io, [this, msg, to] { state_->send_now(msg, to); });
}

const SmThreadStats& SmThread::stats() const { return state_->stats; }

void SmThread::add_remote(const NetAddr& remote, uint64_t incarnation) {
  asio::post(state_->io, [this, remote, incarnation] { state_->add_remote(remote, incarnation); });
}

void SmThread::release_remote(const NetAddr& remote) {
  asio::post(state_->io, [this, remote] { state_->release_remote(remote); });
}

}  // namespace rpc::detail
