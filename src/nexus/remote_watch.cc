#include "nexus/remote_watch.h"

#include <utility>

#include "common/log.h"
#include "common/random.h"
#include "nexus/sm_thread.h"

namespace rpc::detail {

RemoteWatch::RemoteWatch(SmThreadStats& stats, Send send, Failed failed, Timing timing, Now now)
    : stats_(stats),
      send_(std::move(send)),
      failed_(std::move(failed)),
      timing_(timing),
      now_(now) {}

void RemoteWatch::add(const NetAddr& addr, uint64_t incarnation) {
  Remote& r = remotes_[addr.key()];
  if (r.refs++ == 0) {
    r.addr = addr;
    r.last_heard = now_();
  }
  // A server learns its client's incarnation from the connect request,
  // before any heartbeat: a client killed right away must still fail.
  if (r.incarnation == 0) r.incarnation = incarnation;
}

void RemoteWatch::release(const NetAddr& addr) {
  auto it = remotes_.find(addr.key());
  if (it != remotes_.end() && --it->second.refs == 0) remotes_.erase(it);
}

// Another incarnation may mean the old process is gone, or may be forged (a
// datagram's source address proves nothing): only the probe's answer, which
// a forger off the path cannot read, decides.
bool RemoteWatch::disputed(const NetAddr& from, uint64_t incarnation) const {
  auto it = remotes_.find(from.key());
  return it != remotes_.end() && it->second.incarnation != 0 &&
         it->second.incarnation != incarnation;
}

void RemoteWatch::on_message(const NetAddr& from, uint64_t incarnation) {
  auto it = remotes_.find(from.key());
  if (it == remotes_.end()) return;
  Remote& r = it->second;
  if (r.incarnation == 0) r.incarnation = incarnation;  // first heard, or heard again after failing
  if (r.incarnation == incarnation) {
    r.last_heard = now_();
    return;
  }
  if (r.probe_nonce == 0) start_probe(r);
}

void RemoteWatch::start_probe(Remote& r) {
  do {
    r.probe_nonce = random_u64();
  } while (r.probe_nonce == 0);
  const auto now = now_();
  r.probe_next_retry = now + timing_.probe_retry;
  r.probe_deadline = now + timing_.probe_timeout;
  stats_.probes_sent++;
  send_probe(r);
}

void RemoteWatch::send_probe(const Remote& r) {
  SmMsg probe;
  probe.type = SmMsgType::kProbeReq;
  probe.token = r.probe_nonce;
  send_(probe, r.addr);
}

// The answer to our probe decides: the incarnation it carries is the one
// really living at that address.
void RemoteWatch::on_probe_resp(const SmMsg& msg, const NetAddr& from) {
  auto it = remotes_.find(from.key());
  if (it == remotes_.end() || it->second.probe_nonce == 0 || it->second.probe_nonce != msg.token) {
    stats_.probe_resp_dropped++;
    return;
  }
  Remote& r = it->second;
  r.probe_nonce = 0;
  if (r.incarnation == msg.incarnation) {
    // The process we know still lives there: what carried the other
    // incarnation was forged (or a stray from a long-dead process).
    stats_.incarnation_forgeries++;
    RPC_LOG_WARN("sm message from {} carried a foreign incarnation; the remote denies it",
                 from.to_string());
  } else if (r.incarnation != 0) {
    declare_failed(r);
  }
  r.incarnation = msg.incarnation;
  r.last_heard = now_();
}

// Every remote still referred to gets a heartbeat; one silent for the
// failure timeout is declared failed (once: it must be heard again, with
// any incarnation, before it can fail again).
void RemoteWatch::on_heartbeat_tick() {
  const auto now = now_();
  SmMsg hb;
  hb.type = SmMsgType::kHeartbeat;
  for (auto& [key, r] : remotes_) {
    if (r.incarnation != 0 && now - r.last_heard > timing_.failure_timeout) {
      declare_failed(r);
      continue;
    }
    send_(hb, r.addr);
    stats_.heartbeats_sent++;
  }
}

void RemoteWatch::on_retry_tick() {
  const auto now = now_();
  for (auto& [key, r] : remotes_) {
    if (r.probe_nonce == 0) continue;
    if (now >= r.probe_deadline) {
      stats_.probe_timeouts++;  // unconfirmed: the known incarnation stands
      r.probe_nonce = 0;
    } else if (now >= r.probe_next_retry) {
      stats_.retransmissions++;
      send_probe(r);
      r.probe_next_retry = now + timing_.probe_retry;
    }
  }
}

void RemoteWatch::declare_failed(Remote& r) {
  stats_.remote_failures++;
  RPC_LOG_INFO("remote Nexus {} (incarnation {:x}) failed", r.addr.to_string(), r.incarnation);
  failed_(r.addr, r.incarnation);
  r.incarnation = 0;
  r.last_heard = now_();
}

}  // namespace rpc::detail
