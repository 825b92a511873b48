// RpcRaftIo: libraft's struct raft_io over librpc, with MemoryStore as its
// storage. Every raft message is one librpc request (type kRaftMsgReqType)
// to Rpc 0 of the destination replica's Nexus, over a client session made
// on first use; the response is an empty acknowledgement, used only to
// bound the requests in flight to each peer. Received requests are decoded
// (raft_codec.h) and handed to libraft from poll(), never from inside the
// librpc event loop.
//
// libraft's contract, kept here: no callback runs inside the io call that
// started it (each is queued and run by the next poll()); the tick
// callback runs every `msecs` given to start(); time() is a steady clock in
// milliseconds. Single-threaded: everything runs on the thread of the Rpc,
// and libraft with it.
#pragma once

#include "raft_c.h"

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <random>
#include <string>

#include "disk_store.h"
#include "librpc/rpc_all.h"
#include "memory_store.h"
#include "raft_codec.h"

namespace smr {

inline constexpr rpc::ReqType kRaftMsgReqType = 20;
inline constexpr rpc::RpcId kReplicaRpcId = 0;

struct RaftIoStats {
  uint64_t sent = 0;
  uint64_t send_dropped = 0;     // no session, too many in flight, or too large
  uint64_t entries_trimmed = 0;  // AppendEntries cut to fit max_msg_size()
  uint64_t received = 0;
  uint64_t rejected = 0;  // did not decode, or not from a known peer to us
};

class RpcRaftIo {
 public:
  // peers: every replica's id and Nexus address ("host:port"), self included.
  RpcRaftIo(raft_id self, std::map<uint64_t, std::string> peers, MemoryStore& store);
  ~RpcRaftIo();
  RpcRaftIo(const RpcRaftIo&) = delete;
  RpcRaftIo& operator=(const RpcRaftIo&) = delete;

  raft_io* io() { return &io_; }
  // The Rpc to send and receive with. REQUIRES: before raft_start().
  void attach(rpc::Rpc& rpc) { rpc_ = &rpc; }
  // Store through raft_uv in `disk` instead of the MemoryStore (which is
  // then unused). REQUIRES: before raft_init().
  void use_disk(DiskStore& disk) { disk_ = &disk; }
  // The kRaftMsgReqType handler's body: decodes and queues the message,
  // answers the request at once.
  void on_request(rpc::ReqHandle& handle);
  // The session callback's body: forgets a peer's failed session.
  void on_session_event(rpc::SessionNum sn, rpc::SessionEvent event);
  // Runs due ticks, queued callbacks and received messages. Returns whether
  // it did anything. Call it from the main loop, outside the event loop.
  bool poll();
  bool closed() const { return closed_; }
  const RaftIoStats& stats() const { return stats_; }
  uint64_t now_ms() const;

  // At most this many requests in flight to one peer; beyond it a message
  // is dropped (libraft resends: a peer that does not keep up is probed).
  static constexpr uint32_t kMaxInFlightPerPeer = 64;
  // libraft checks its timers only when ticked: ticking at its heartbeat
  // interval (what it asks for) quantizes election timeouts to that step,
  // so followers often time out in the same tick and split the vote. Ticks
  // come this often instead (more ticks are harmless: each compares times).
  static constexpr unsigned kTickResolutionMs = 1;
  // A failed session is made again at most this often.
  static constexpr uint64_t kReconnectIntervalMs = 100;

 private:
  struct Peer {
    std::string address;
    rpc::SessionNum session = rpc::kInvalidSessionNum;
    uint32_t in_flight = 0;
    uint64_t last_connect_ms = 0;
    bool failed = false;  // the session is to be destroyed and made again
  };
  struct Outgoing;

  static RpcRaftIo& self_of(raft_io* io) { return *static_cast<RpcRaftIo*>(io->impl); }
  int send(raft_io_send* req, const raft_message& msg, raft_io_send_cb cb);
  Peer* session_to(raft_id id);
  // Sessions to every peer are made at start and remade after a failure,
  // not on first use: a candidate's first RequestVote would otherwise wait
  // for a session handshake (tens of ms), long enough for the other
  // follower to time out too and split the vote.
  void connect_peers();
  void defer(std::function<void()> fn) { deferred_.push_back(std::move(fn)); }

  raft_io io_{};
  raft_id self_;
  std::map<raft_id, Peer> peers_;
  MemoryStore& store_;
  DiskStore* disk_ = nullptr;
  raft_io_close_cb close_cb_ = nullptr;
  bool close_pending_ = false;
  rpc::Rpc* rpc_ = nullptr;
  std::chrono::steady_clock::time_point epoch_ = std::chrono::steady_clock::now();
  std::mt19937 rng_;
  unsigned tick_ms_ = 0;
  uint64_t next_tick_ms_ = 0;
  uint64_t last_connect_check_ms_ = 0;
  raft_io_tick_cb tick_cb_ = nullptr;
  raft_io_recv_cb recv_cb_ = nullptr;
  bool closing_ = false;
  bool closed_ = false;
  std::deque<std::function<void()>> deferred_;
  std::deque<DecodedMsg> received_;
  RaftIoStats stats_;
};

}  // namespace smr
