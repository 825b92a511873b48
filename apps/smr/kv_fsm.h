// KvFsm: the replicated state machine, a string -> string map behind
// libraft's struct raft_fsm. Puts and gets are both log entries, so a get
// answered by the leader reflects every put committed before it
// (linearizable reads without leases).
#pragma once

#include "raft_c.h"

#include <cstdint>

#include "kv_proto.h"

namespace smr {

// What apply() leaves for the raft_apply callback, which libraft runs
// right after apply() returns (replication.c, applyCommand): valid until
// the next apply.
struct KvResult {
  bool bad_command = false;
  bool found = false;
  std::string value;
};

class KvFsm {
 public:
  KvFsm();
  raft_fsm* fsm() { return &fsm_; }
  const KvMap& map() const { return map_; }
  uint64_t applied() const { return applied_; }
  // FNV-1a over the pairs in key order: equal on replicas with equal maps.
  uint64_t digest() const;

 private:
  static KvFsm& self_of(raft_fsm* fsm) { return *static_cast<KvFsm*>(fsm->data); }
  raft_fsm fsm_{};
  KvMap map_;
  KvResult result_;
  uint64_t applied_ = 0;
};

}  // namespace smr
