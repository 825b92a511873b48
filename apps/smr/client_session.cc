// SmrClient; see client_session.h.
#include "client_session.h"

#include <cstring>

namespace smr {

using Clock = std::chrono::steady_clock;

namespace {
// A refused command (not leader, busy, no session) is tried again after this.
constexpr auto kRetryDelay = std::chrono::milliseconds(20);
}  // namespace

struct SmrClient::Op {
  KvCommand cmd;
  Done done;
  Clock::time_point deadline;
  uint64_t target = 0;
  rpc::OwnedBuffer req;
  rpc::OwnedBuffer resp;
};

SmrClient::SmrClient(rpc::Rpc& rpc, std::map<uint64_t, std::string> replicas,
                     std::chrono::milliseconds attempt_timeout, std::chrono::milliseconds deadline)
    : rpc_(rpc), attempt_timeout_(attempt_timeout), deadline_(deadline) {
  for (auto& [id, address] : replicas) replicas_[id].address = std::move(address);
  leader_ = replicas_.begin()->first;
}

SmrClient::~SmrClient() {
  for (auto& [when, op] : retries_) delete op;
}

uint64_t SmrClient::next_after(uint64_t id) const {
  auto it = replicas_.upper_bound(id);
  return it == replicas_.end() ? replicas_.begin()->first : it->first;
}

rpc::SessionNum SmrClient::session_to(uint64_t id) {
  Replica& r = replicas_.at(id);
  if (r.session != rpc::kInvalidSessionNum && !r.failed) return r.session;
  if (r.session != rpc::kInvalidSessionNum) (void)rpc_.destroy_session(r.session);
  r.session = rpc::kInvalidSessionNum;
  r.failed = false;
  auto sn = rpc_.create_session(r.address, 0);
  if (sn) r.session = *sn;
  return r.session;
}

void SmrClient::on_session_event(rpc::SessionNum sn, rpc::SessionEvent event) {
  if (event == rpc::SessionEvent::kConnected) return;
  for (auto& [id, r] : replicas_) {
    if (r.session == sn) r.failed = true;
  }
}

void SmrClient::submit(KvCommand cmd, Done done) {
  auto* op = new Op{std::move(cmd), std::move(done), Clock::now() + deadline_, leader_, {}, {}};
  op->req = rpc::OwnedBuffer(rpc_, command_size(op->cmd));
  op->resp = rpc::OwnedBuffer(rpc_, kMaxReplyBytes);
  in_flight_++;
  if (!op->req.valid() || !op->resp.valid()) {
    finish(op, Outcome::kFailed, KvReply{.status = KvStatus::kBusy});
    return;
  }
  encode_command(op->cmd, op->req.data());
  send(op);
}

void SmrClient::finish(Op* op, Outcome outcome, const KvReply& reply) {
  in_flight_--;
  Done done = std::move(op->done);
  delete op;
  done(outcome, reply);
}

void SmrClient::retry_later(Op* op, uint64_t next_replica) {
  if (Clock::now() + kRetryDelay > op->deadline) {
    finish(op, Outcome::kFailed, KvReply{.status = KvStatus::kNotLeader});
    return;
  }
  op->target = next_replica;
  retries_.emplace_back(Clock::now() + kRetryDelay, op);
}

void SmrClient::send(Op* op) {
  const rpc::SessionNum sn = session_to(op->target);
  if (sn == rpc::kInvalidSessionNum) {
    retry_later(op, next_after(op->target));
    return;
  }
  op->resp.resize(op->resp.max_size());
  const rpc::Errc errc = rpc_.enqueue_request(
      sn, kClientReqType, op->req, op->resp,
      [this, op](rpc::Rpc&, const rpc::Completion& c) {
        if (c.errc != rpc::Errc::kOk) {
          // Sent, never answered: the replica may have applied it.
          replicas_.at(op->target).failed = c.errc != rpc::Errc::kTimedOut;
          if (leader_ == op->target) leader_ = next_after(op->target);
          finish(op, Outcome::kUnknown, KvReply{.status = KvStatus::kUnknown});
          return;
        }
        auto reply = decode_reply({op->resp.data(), c.resp_size});
        if (!reply) {
          finish(op, Outcome::kUnknown, KvReply{.status = KvStatus::kBadRequest});
          return;
        }
        switch (reply->status) {
          case KvStatus::kOk:
            leader_ = op->target;
            finish(op, Outcome::kOk, *reply);
            return;
          case KvStatus::kBadRequest:
            finish(op, Outcome::kFailed, *reply);
            return;
          case KvStatus::kUnknown:
            if (reply->leader_id != 0 && replicas_.count(reply->leader_id)) {
              leader_ = reply->leader_id;
            }
            finish(op, Outcome::kUnknown, *reply);
            return;
          case KvStatus::kNotLeader:
          case KvStatus::kBusy: {
            redirects_++;
            uint64_t next = next_after(op->target);
            if (reply->leader_id != 0 && replicas_.count(reply->leader_id) &&
                reply->leader_id != op->target) {
              next = reply->leader_id;
            }
            leader_ = next;
            // Straight to a named leader; after a pause when guessing.
            if (next == reply->leader_id && reply->status == KvStatus::kNotLeader &&
                Clock::now() < op->deadline) {
              op->target = next;
              send(op);
            } else {
              retry_later(op, next);
            }
            return;
          }
        }
      },
      rpc::RequestOptions{.timeout = attempt_timeout_});
  if (errc != rpc::Errc::kOk) {
    replicas_.at(op->target).failed = true;
    retry_later(op, next_after(op->target));
  }
}

void SmrClient::poll() {
  const auto now = Clock::now();
  for (size_t n = retries_.size(); n > 0 && !retries_.empty(); n--) {
    auto [when, op] = retries_.front();
    if (when > now) break;
    retries_.pop_front();
    send(op);
  }
}

}  // namespace smr
