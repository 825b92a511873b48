// RpcRaftIo; see rpc_raft_io.h.
#include "rpc_raft_io.h"

#include <fmt/core.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <utility>

namespace smr {

// One raft message in flight: its request and (empty) response buffers,
// freed by the continuation.
struct RpcRaftIo::Outgoing {
  rpc::OwnedBuffer req;
  rpc::OwnedBuffer resp;
  raft_id peer = 0;
};

RpcRaftIo::RpcRaftIo(raft_id self, std::map<uint64_t, std::string> peers, MemoryStore& store)
    : self_(self), store_(store), rng_(static_cast<unsigned>(self * 7919 + 17)) {
  for (auto& [id, address] : peers) peers_[id].address = std::move(address);
  rng_.seed(static_cast<unsigned>(std::random_device{}() ^ self));
  io_.version = 1;
  io_.impl = this;
  // Storage calls go to raft_uv when a DiskStore is in use (its callbacks
  // come from DiskStore::poll(), run by poll()), else to the MemoryStore.
  io_.init = [](raft_io* io, raft_id id, const char* address) {
    RpcRaftIo& s = self_of(io);
    return s.disk_ != nullptr ? s.disk_->io()->init(s.disk_->io(), id, address) : 0;
  };
  io_.close = [](raft_io* io, raft_io_close_cb cb) {
    RpcRaftIo& s = self_of(io);
    s.closing_ = true;
    s.tick_cb_ = nullptr;
    if (s.disk_ != nullptr) s.disk_->close();
    // After every callback already queued (and raft_uv's close), as libraft
    // expects of a close: poll() finishes it.
    s.close_cb_ = cb;
    s.close_pending_ = true;
  };
  io_.load = [](raft_io* io, raft_term* term, raft_id* voted_for, raft_snapshot** snapshot,
                raft_index* start_index, raft_entry** entries, size_t* n_entries) {
    RpcRaftIo& s = self_of(io);
    if (s.disk_ != nullptr) {
      raft_io* d = s.disk_->io();
      const int rv = d->load(d, term, voted_for, snapshot, start_index, entries, n_entries);
      // libraft reports the errmsg of the raft_io it was given: ours.
      if (rv != 0) std::memcpy(io->errmsg, d->errmsg, sizeof io->errmsg);
      return rv;
    }
    return s.store_.load(term, voted_for, snapshot, start_index, entries, n_entries);
  };
  io_.start = [](raft_io* io, unsigned msecs, raft_io_tick_cb tick, raft_io_recv_cb recv) {
    RpcRaftIo& s = self_of(io);
    if (s.rpc_ == nullptr) return RAFT_INVALID;
    s.tick_ms_ = std::min(msecs, kTickResolutionMs);
    s.tick_cb_ = tick;
    s.recv_cb_ = recv;
    s.next_tick_ms_ = s.now_ms() + s.tick_ms_;
    s.connect_peers();
    if (s.disk_ != nullptr) {
      // raft_uv's own tick and receive are unused: RpcRaftIo does both.
      raft_io* d = s.disk_->io();
      return d->start(
          d, msecs, [](raft_io*) {}, [](raft_io*, raft_message*) {});
    }
    return 0;
  };
  io_.bootstrap = [](raft_io* io, const raft_configuration* conf) {
    RpcRaftIo& s = self_of(io);
    if (s.disk_ != nullptr) return s.disk_->io()->bootstrap(s.disk_->io(), conf);
    return s.store_.bootstrap(*conf);
  };
  io_.recover = [](raft_io*, const raft_configuration*) { return RAFT_NOTFOUND; };
  io_.set_term = [](raft_io* io, raft_term term) {
    RpcRaftIo& s = self_of(io);
    if (s.disk_ != nullptr) return s.disk_->io()->set_term(s.disk_->io(), term);
    s.store_.set_term(term);
    return 0;
  };
  io_.set_vote = [](raft_io* io, raft_id id) {
    RpcRaftIo& s = self_of(io);
    if (s.disk_ != nullptr) return s.disk_->io()->set_vote(s.disk_->io(), id);
    s.store_.set_vote(id);
    return 0;
  };
  io_.send = [](raft_io* io, raft_io_send* req, const raft_message* msg, raft_io_send_cb cb) {
    return self_of(io).send(req, *msg, cb);
  };
  io_.append = [](raft_io* io, raft_io_append* req, const raft_entry entries[], unsigned n,
                  raft_io_append_cb cb) {
    RpcRaftIo& s = self_of(io);
    if (s.disk_ != nullptr) return s.disk_->io()->append(s.disk_->io(), req, entries, n, cb);
    s.store_.append(entries, n);  // copied now; "durable" when the callback runs
    req->cb = cb;
    s.defer([req] {
      if (req->cb != nullptr) req->cb(req, 0);
    });
    return 0;
  };
  io_.truncate = [](raft_io* io, raft_index index) {
    RpcRaftIo& s = self_of(io);
    if (s.disk_ != nullptr) return s.disk_->io()->truncate(s.disk_->io(), index);
    s.store_.truncate(index);
    return 0;
  };
  io_.snapshot_put = [](raft_io* io, unsigned trailing, raft_io_snapshot_put* req,
                        const raft_snapshot* snapshot, raft_io_snapshot_put_cb cb) {
    RpcRaftIo& s = self_of(io);
    if (s.disk_ != nullptr) {
      return s.disk_->io()->snapshot_put(s.disk_->io(), trailing, req, snapshot, cb);
    }
    const int rv = s.store_.snapshot_put(trailing, *snapshot);
    if (rv != 0) return rv;
    req->cb = cb;
    s.defer([req] {
      if (req->cb != nullptr) req->cb(req, 0);
    });
    return 0;
  };
  io_.snapshot_get = [](raft_io* io, raft_io_snapshot_get* req, raft_io_snapshot_get_cb cb) {
    RpcRaftIo& s = self_of(io);
    if (s.disk_ != nullptr) return s.disk_->io()->snapshot_get(s.disk_->io(), req, cb);
    req->cb = cb;
    s.defer([&s, req] {
      raft_snapshot* snap = s.store_.snapshot_copy();
      req->cb(req, snap, snap == nullptr ? RAFT_NOTFOUND : 0);
    });
    return 0;
  };
  io_.time = [](raft_io* io) -> raft_time { return self_of(io).now_ms(); };
  io_.random = [](raft_io* io, int min, int max) {
    RpcRaftIo& s = self_of(io);
    if (max <= min) return min;
    return std::uniform_int_distribution<int>(min, max - 1)(s.rng_);
  };
}

RpcRaftIo::~RpcRaftIo() = default;

uint64_t RpcRaftIo::now_ms() const {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::steady_clock::now() - epoch_)
                                   .count());
}

RpcRaftIo::Peer* RpcRaftIo::session_to(raft_id id) {
  auto it = peers_.find(id);
  if (it == peers_.end() || id == self_) return nullptr;
  Peer& p = it->second;
  if (p.session != rpc::kInvalidSessionNum && !p.failed) return &p;
  const uint64_t now = now_ms();
  if (p.last_connect_ms != 0 && now - p.last_connect_ms < kReconnectIntervalMs) return nullptr;
  if (p.session != rpc::kInvalidSessionNum) {
    // Fails harmlessly when the library already removed it.
    (void)rpc_->destroy_session(p.session);
    p.session = rpc::kInvalidSessionNum;
  }
  p.last_connect_ms = now;
  p.failed = false;
  auto sn = rpc_->create_session(p.address, kReplicaRpcId);
  if (!sn) return nullptr;
  p.session = *sn;
  return &p;
}

void RpcRaftIo::connect_peers() {
  for (auto& [id, p] : peers_) {
    if (id != self_) session_to(id);
  }
}

int RpcRaftIo::send(raft_io_send* req, const raft_message& msg, raft_io_send_cb cb) {
  req->cb = cb;
  int status = 0;
  Peer* peer = closing_ ? nullptr : session_to(msg.server_id);
  if (peer == nullptr || peer->in_flight >= kMaxInFlightPerPeer) {
    status = RAFT_NOCONNECTION;
  } else {
    unsigned n = msg.type == RAFT_IO_APPEND_ENTRIES ? msg.append_entries.n_entries : 0;
    size_t size = encoded_size(msg, n);
    if (size > rpc_->max_msg_size() && msg.type == RAFT_IO_APPEND_ENTRIES) {
      // libraft 0.15 sends every entry from next_index on: send the prefix
      // that fits; the follower's answer moves the leader on from there.
      n = entries_that_fit(msg, rpc_->max_msg_size());
      size = encoded_size(msg, n);
      stats_.entries_trimmed += msg.append_entries.n_entries - n;
    }
    auto* out =
        new Outgoing{rpc::OwnedBuffer(*rpc_, size), rpc::OwnedBuffer(*rpc_, 16), msg.server_id};
    if (size > rpc_->max_msg_size() ||
        (n == 0 && msg.type == RAFT_IO_APPEND_ENTRIES && msg.append_entries.n_entries != 0) ||
        !out->req.valid() || !out->resp.valid()) {
      delete out;
      status = RAFT_TOOBIG;
    } else {
      encode(wire_message(msg, n), self_, n, out->req.data());
      const rpc::Errc errc =
          rpc_->enqueue_request(peer->session, kRaftMsgReqType, out->req, out->resp,
                                [this, out](rpc::Rpc&, const rpc::Completion&) {
                                  auto it = peers_.find(out->peer);
                                  if (it != peers_.end() && it->second.in_flight > 0)
                                    it->second.in_flight--;
                                  delete out;
                                });
      if (errc != rpc::Errc::kOk) {
        delete out;
        peer->failed = true;
        status = RAFT_NOCONNECTION;
      } else {
        peer->in_flight++;
        stats_.sent++;
      }
    }
  }
  if (status != 0) stats_.send_dropped++;
  // Like raft_uv: the callback says the message left (or could not), later.
  defer([req, status] {
    if (req->cb != nullptr) req->cb(req, status);
  });
  return 0;
}

void RpcRaftIo::on_request(rpc::ReqHandle& h) {
  const rpc::MsgBuffer& req = h.request();
  DecodedMsg d;
  std::string why;
  bool ok = decode({req.data(), req.size()}, d, &why);
  if (ok && (d.destination != self_ || d.msg.server_id == self_ ||
             peers_.find(d.msg.server_id) == peers_.end())) {
    why = fmt::format("from {} to {}: not a peer's message to us", d.msg.server_id, d.destination);
    ok = false;
  }
  if (ok && !closing_) {
    d.msg.server_address = peers_[d.msg.server_id].address.c_str();
    received_.push_back(std::move(d));
    stats_.received++;
  } else if (!ok) {
    stats_.rejected++;
    if (stats_.rejected <= 10) fmt::print(stderr, "smr: dropped a raft message: {}\n", why);
  }
  rpc::MsgBuffer& resp = h.pre_resp_buffer();
  resp.resize(0);
  h.rpc().enqueue_response(h, resp);
}

void RpcRaftIo::on_session_event(rpc::SessionNum sn, rpc::SessionEvent event) {
  if (event == rpc::SessionEvent::kConnected) return;
  for (auto& [id, p] : peers_) {
    if (p.session == sn) {
      p.failed = true;
    }
  }
}

bool RpcRaftIo::poll() {
  bool did = false;
  if (disk_ != nullptr) disk_->poll();
  // Callbacks queued by earlier io calls; those they queue wait for the
  // next poll, so none runs inside the call that queued it.
  for (size_t n = deferred_.size(); n > 0; n--) {
    auto fn = std::move(deferred_.front());
    deferred_.pop_front();
    fn();
    did = true;
  }
  while (!received_.empty() && recv_cb_ != nullptr && !closing_) {
    DecodedMsg d = std::move(received_.front());
    received_.pop_front();
    d.release();  // libraft owns the entries and snapshot data now
    recv_cb_(&io_, &d.msg);
    did = true;
  }
  if (close_pending_ && deferred_.empty() && (disk_ == nullptr || disk_->closed())) {
    close_pending_ = false;
    closed_ = true;
    if (close_cb_ != nullptr) close_cb_(&io_);
    did = true;
  }
  if (tick_cb_ != nullptr && !closing_) {
    const uint64_t now = now_ms();
    if (now - last_connect_check_ms_ >= kReconnectIntervalMs) {
      last_connect_check_ms_ = now;
      connect_peers();
    }
    if (now >= next_tick_ms_) {
      next_tick_ms_ = now + tick_ms_;
      tick_cb_(&io_);
      did = true;
    }
  }
  return did;
}

}  // namespace smr
