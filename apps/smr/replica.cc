// librpc-smr-replica: one Raft replica (libraft) of the replicated
// key-value store, with raft's messages and the clients' commands carried
// by librpc (Rpc 0 of a Nexus at this replica's address in --peers).
// Prints one line per role change ("replica N: state=leader term=T
// leader=L"), which the tests read.
//
//   librpc-smr-replica --id N --peers 1=HOST:PORT,2=HOST:PORT,3=HOST:PORT
//                      [--election-timeout-ms MS] [--heartbeat-ms MS]
//                      [--snapshot-threshold N] [--seconds S] [--spin-us US]
#include <fmt/core.h>
#include <time.h>
#include "raft_c.h"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "app_common.h"
#include "cli.h"
#include "disk_store.h"
#include "kv_fsm.h"
#include "kv_proto.h"
#include "librpc/rpc_all.h"
#include "memory_store.h"
#include "rpc_raft_io.h"
#include "smr_common.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  uint64_t id = 0;
  std::string peers;
  unsigned election_timeout_ms = 1000;
  unsigned heartbeat_ms = 100;
  unsigned snapshot_threshold = 1024;
  unsigned snapshot_trailing = 128;
  uint64_t seconds = 0;
  uint64_t spin_us = 200;
  bool pre_vote = true;
  std::string data_dir;  // empty: MemoryStore
  app::TransportOptions transport;
};

// Client commands waiting for raft_apply; bounded so a flood is refused
// (kBusy) rather than queued without limit.
constexpr size_t kMaxPendingApplies = 4096;

class Replica {
 public:
  Replica(const Options& opt, std::map<uint64_t, std::string> peers)
      : opt_(opt),
        peers_(std::move(peers)),
        disk_(opt.data_dir.empty() ? nullptr : std::make_unique<smr::DiskStore>(opt.data_dir)),
        io_(opt.id, peers_, store_) {
    if (disk_ != nullptr) io_.use_disk(*disk_);
  }

  // The handlers and session callback reach the replica through
  // RpcConfig::context / captures; they only queue work for run().
  void on_client_request(rpc::ReqHandle& h) {
    const rpc::MsgBuffer& req = h.request();
    client_queue_.push_back(Pending{&h, {req.data(), req.data() + req.size()}});
  }
  smr::RpcRaftIo& io() { return io_; }

  int run(rpc::Rpc& rpc);

 private:
  struct Pending {
    rpc::ReqHandle* handle;
    std::vector<uint8_t> bytes;
  };
  struct Apply {
    struct raft_apply req;
    rpc::ReqHandle* handle;
    Replica* replica;
  };

  void serve_clients();
  void respond(rpc::ReqHandle& h, const smr::KvReply& reply);
  smr::KvReply not_leader() {
    smr::KvReply r{.status = smr::KvStatus::kNotLeader};
    raft_id id = 0;
    const char* address = nullptr;
    raft_leader(&raft_, &id, &address);
    r.leader_id = id;
    if (address != nullptr) r.leader_address = address;
    return r;
  }
  void report_role();

  const Options& opt_;
  std::map<uint64_t, std::string> peers_;
  smr::MemoryStore store_;
  std::unique_ptr<smr::DiskStore> disk_;
  smr::KvFsm fsm_;
  smr::RpcRaftIo io_;
  raft raft_{};
  rpc::Rpc* rpc_ = nullptr;
  std::deque<Pending> client_queue_;
  size_t pending_applies_ = 0;
  int last_state_ = -1;
  raft_term last_term_ = 0;
  raft_id last_leader_ = 0;
  bool raft_closed_ = false;
};

void Replica::respond(rpc::ReqHandle& h, const smr::KvReply& reply) {
  const std::vector<uint8_t> bytes = smr::encode_reply(reply);
  rpc::MsgBuffer& pre = h.pre_resp_buffer();
  if (bytes.size() <= pre.max_size()) {
    std::memcpy(pre.data(), bytes.data(), bytes.size());
    pre.resize(bytes.size());
    rpc_->enqueue_response(h, pre);
    return;
  }
  rpc::MsgBuffer big = rpc_->alloc_msg_buffer(bytes.size());
  if (!big.valid()) {
    rpc_->enqueue_error_response(h, 1);
    return;
  }
  std::memcpy(big.data(), bytes.data(), bytes.size());
  rpc_->enqueue_response(h, big);  // the Rpc's now, until the slot's next request
}

void Replica::serve_clients() {
  while (!client_queue_.empty()) {
    Pending p = std::move(client_queue_.front());
    client_queue_.pop_front();
    auto cmd = smr::decode_command(p.bytes);
    if (!cmd) {
      respond(*p.handle, smr::KvReply{.status = smr::KvStatus::kBadRequest});
      continue;
    }
    if (raft_state(&raft_) != RAFT_LEADER) {
      respond(*p.handle, not_leader());
      continue;
    }
    if (pending_applies_ >= kMaxPendingApplies) {
      respond(*p.handle, smr::KvReply{.status = smr::KvStatus::kBusy});
      continue;
    }
    raft_buffer buf{raft_malloc(p.bytes.size()), p.bytes.size()};
    if (buf.base == nullptr) {
      respond(*p.handle, smr::KvReply{.status = smr::KvStatus::kBusy});
      continue;
    }
    std::memcpy(buf.base, p.bytes.data(), p.bytes.size());
    auto* a = new Apply{{}, p.handle, this};
    a->req.data = a;
    const int rv =
        raft_apply(&raft_, &a->req, &buf, 1, [](struct raft_apply* req, int status, void* result) {
          auto* ap = static_cast<Apply*>(req->data);
          Replica& self = *ap->replica;
          self.pending_applies_--;
          smr::KvReply reply;
          if (status != 0) {
            // Appended by us, then leadership lost (or shutdown): it may still
            // commit under the next leader. The client must not assume either.
            reply = self.not_leader();
            reply.status = smr::KvStatus::kUnknown;
          } else {
            const auto* res = static_cast<const smr::KvResult*>(result);
            reply.status = res->bad_command ? smr::KvStatus::kBadRequest : smr::KvStatus::kOk;
            reply.index = req->index;
            reply.found = res->found;
            reply.value = res->value;
          }
          self.respond(*ap->handle, reply);
          delete ap;
        });
    if (rv != 0) {
      // Only RAFT_NOTLEADER can happen here (checked above; io->append does
      // not fail); libraft 0.15 leaves the buffer to us on that path.
      if (rv == RAFT_NOTLEADER) raft_free(buf.base);
      respond(*p.handle, not_leader());
      delete a;
      continue;
    }
    pending_applies_++;
  }
}

void Replica::report_role() {
  const int state = raft_state(&raft_);
  raft_id leader = 0;
  const char* address = nullptr;
  raft_leader(&raft_, &leader, &address);
  if (state == RAFT_LEADER) leader = opt_.id;
  if (state == last_state_ && raft_.current_term == last_term_ && leader == last_leader_) return;
  last_state_ = state;
  last_term_ = raft_.current_term;
  last_leader_ = leader;
  static const char* const kNames[] = {"unavailable", "follower", "candidate", "leader"};
  fmt::print("replica {}: state={} term={} leader={} commit={} wall_ms={}\n", opt_.id,
             kNames[state < 4 ? state : 0], raft_.current_term, leader, raft_.commit_index,
             std::chrono::duration_cast<std::chrono::milliseconds>(
                 std::chrono::system_clock::now().time_since_epoch())
                 .count());
}

int Replica::run(rpc::Rpc& rpc) {
  rpc_ = &rpc;
  io_.attach(rpc);
  const std::string& self_address = peers_.at(opt_.id);
  if (int rv = raft_init(&raft_, io_.io(), fsm_.fsm(), opt_.id, self_address.c_str()); rv != 0) {
    fmt::print(stderr, "smr_replica: raft_init: {}\n", raft_strerror(rv));
    return app::kExitFailure;
  }
  raft_set_election_timeout(&raft_, opt_.election_timeout_ms);
  raft_set_heartbeat_timeout(&raft_, opt_.heartbeat_ms);
  raft_set_snapshot_threshold(&raft_, opt_.snapshot_threshold);
  raft_set_snapshot_trailing(&raft_, opt_.snapshot_trailing);
  // libraft 0.15 denies votes while it still hears (or recently heard) a
  // leader, without looking at the term (recv_request_vote.c). Without
  // pre-vote the first follower to time out after a leader dies is denied,
  // the second then stands in the same term, the vote splits and failover
  // takes two or three election timeouts. Pre-vote costs the first one a
  // round trip instead, and keeps a partitioned replica from bumping terms.
  raft_set_pre_vote(&raft_, opt_.pre_vote);
  // Every replica bootstraps the same configuration: the first entry is
  // then identical everywhere (libraft's documented way to start a cluster).
  raft_configuration conf;
  raft_configuration_init(&conf);
  for (const auto& [id, address] : peers_) {
    raft_configuration_add(&conf, id, address.c_str(), RAFT_VOTER);
  }
  int rv = raft_bootstrap(&raft_, &conf);
  raft_configuration_close(&conf);
  // A disk store that holds state already: restart from it.
  if (rv == RAFT_CANTBOOTSTRAP && disk_ != nullptr) rv = 0;
  if (rv == 0) rv = raft_start(&raft_);
  if (rv != 0) {
    fmt::print(stderr, "smr_replica: cannot start raft: {} ({})\n", raft_strerror(rv),
               raft_errmsg(&raft_));
    return app::kExitFailure;
  }
  fmt::print("replica {} listening on {} ({} replicas, election timeout {} ms, {} store)\n",
             opt_.id, self_address, peers_.size(), opt_.election_timeout_ms,
             disk_ != nullptr ? "disk" : "memory");

  const auto end = Clock::now() + std::chrono::seconds(opt_.seconds);
  auto last_work = Clock::now();
  const auto spin = std::chrono::microseconds(opt_.spin_us);
  bool closing = false;
  raft_index last_applied = 0;
  while (!io_.closed()) {
    if (!closing && (app::g_stop_requested.load(std::memory_order_relaxed) ||
                     (opt_.seconds != 0 && Clock::now() >= end))) {
      closing = true;
      last_applied = raft_last_applied(&raft_);
      raft_.data = this;
      raft_close(&raft_, [](raft* r) { static_cast<Replica*>(r->data)->raft_closed_ = true; });
    }
    const uint64_t pkts = rpc.stats().rx_pkts + rpc.stats().tx_pkts;
    rpc.run_event_loop_once();
    bool did = io_.poll();
    if (!client_queue_.empty()) {
      if (closing) {
        for (auto& p : client_queue_) respond(*p.handle, not_leader());
        client_queue_.clear();
      } else {
        serve_clients();
      }
      did = true;
    }
    if (!closing) report_role();
    did = did || rpc.stats().rx_pkts + rpc.stats().tx_pkts != pkts;
    // Poll hard while there is traffic; otherwise sleep briefly so idle
    // replicas leave the cores to others (the machine is shared).
    const auto now = Clock::now();
    if (did) {
      last_work = now;
    } else if (now - last_work > spin) {
      const timespec nap{0, 50'000};
      nanosleep(&nap, nullptr);
    }
  }
  // Run the loop a little longer so the last answers leave.
  for (int i = 0; i < 100; i++) rpc.run_event_loop_once();
  const auto& s = io_.stats();
  fmt::print(
      "replica {}: stopped; last_applied={} digest={:016x} applied={} keys={} raft_sent={} "
      "raft_received={} raft_rejected={} send_dropped={} entries_trimmed={} raft_closed={}\n",
      opt_.id, last_applied, fsm_.digest(), fsm_.applied(), fsm_.map().size(), s.sent, s.received,
      s.rejected, s.send_dropped, s.entries_trimmed, raft_closed_ ? 1 : 0);
  return app::kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App cli("One Raft replica (libraft) of the replicated key-value store, over librpc.",
               "librpc-smr-replica");
  Options opt;
  cli.add_option("--id", opt.id, "this replica's raft id (a key of --peers)")->required();
  cli.add_option("--peers", opt.peers, "every replica: ID=HOST:PORT,ID=HOST:PORT,...")->required();
  cli.add_option("--election-timeout-ms", opt.election_timeout_ms,
                 "raft election timeout (randomized to 1-2x)")
      ->check(CLI::Range(50u, 60000u))
      ->capture_default_str();
  cli.add_option("--heartbeat-ms", opt.heartbeat_ms, "raft heartbeat (and tick) interval")
      ->check(CLI::Range(5u, 10000u))
      ->capture_default_str();
  cli.add_option("--snapshot-threshold", opt.snapshot_threshold, "log entries between snapshots")
      ->check(CLI::Range(4u, 1u << 30))
      ->capture_default_str();
  cli.add_option("--snapshot-trailing", opt.snapshot_trailing,
                 "entries kept in the log behind a snapshot")
      ->check(CLI::Range(0u, 1u << 30))
      ->capture_default_str();
  cli.add_option("--pre-vote", opt.pre_vote, "raft pre-vote (dissertation 9.6)")
      ->capture_default_str();
  cli.add_option("--data-dir", opt.data_dir,
                 "keep raft's log in this directory (libraft's raft_uv store; it must exist) "
                 "instead of in memory, so a replica can restart under its id");
  cli.add_option("--seconds", opt.seconds, "stop after N seconds (default: at SIGINT/SIGTERM)");
  cli.add_option("--spin-us", opt.spin_us,
                 "poll without sleeping this long after the last work, then nap 50 us")
      ->capture_default_str();
  app::add_transport_options(cli, opt.transport);
  if (auto status = measure::parse_command_line(cli, argc, argv)) return *status;
  auto peers = smr::parse_peers(opt.peers);
  if (!peers) return measure::usage_error(cli, "--peers: expected ID=HOST:PORT,...");
  if (peers->count(opt.id) == 0) return measure::usage_error(cli, "--id is not in --peers");
  if (opt.heartbeat_ms >= opt.election_timeout_ms) {
    return measure::usage_error(cli, "--heartbeat-ms must be below --election-timeout-ms");
  }

  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  app::install_stop_signals();
  try {
    Replica replica(opt, *peers);
    rpc::Nexus nexus(rpc::NexusConfig{.uri = peers->at(opt.id)});
    if (auto ok = nexus.register_handler(
            smr::kRaftMsgReqType,
            [](rpc::ReqHandle& h) { static_cast<Replica*>(h.context())->io().on_request(h); });
        !ok) {
      fmt::print(stderr, "smr_replica: {}\n", ok.error());
      return app::kExitFailure;
    }
    if (auto ok = nexus.register_handler(
            smr::kClientReqType,
            [](rpc::ReqHandle& h) { static_cast<Replica*>(h.context())->on_client_request(h); });
        !ok) {
      fmt::print(stderr, "smr_replica: {}\n", ok.error());
      return app::kExitFailure;
    }
    rpc::RpcConfig config = opt.transport.rpc_config(smr::kReplicaRpcId);
    config.context = &replica;
    config.session_callback = [&replica](rpc::SessionNum sn, rpc::SessionEvent event, rpc::SmErr) {
      replica.io().on_session_event(sn, event);
    };
    rpc::Rpc rpc(nexus, config);
    return replica.run(rpc);
  } catch (const rpc::Error& e) {
    fmt::print(stderr, "smr_replica: {}\n", e.what());
    return app::kExitFailure;
  } catch (const std::runtime_error& e) {  // DiskStore
    fmt::print(stderr, "smr_replica: {}\n", e.what());
    return app::kExitFailure;
  }
}
