// MemoryStore: libraft's persistent state (term, vote, log entries, last
// snapshot) kept in this process's memory. It survives raft_close() and a
// new raft_init()/raft_start() in the same process (load() hands it back),
// not the process: a replica that restarts with it must rejoin as a new
// server (a restarted voter with an empty log could vote twice in a term).
// The synchronous halves of raft_io's storage calls; RpcRaftIo defers
// their callbacks. Single-threaded (the replica's thread).
#pragma once

#include "raft_c.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace smr {

class MemoryStore {
 public:
  MemoryStore() = default;
  ~MemoryStore();
  MemoryStore(const MemoryStore&) = delete;
  MemoryStore& operator=(const MemoryStore&) = delete;

  // raft_io->load: copies out (raft owns the copies: one batch for every
  // entry's data, the snapshot with one buffer).
  int load(raft_term* term, raft_id* voted_for, raft_snapshot** snapshot, raft_index* start_index,
           raft_entry** entries, size_t* n_entries) const;
  // RAFT_CANTBOOTSTRAP unless pristine.
  int bootstrap(const raft_configuration& conf);
  void set_term(raft_term term) {
    term_ = term;
    voted_for_ = 0;
  }
  void set_vote(raft_id id) { voted_for_ = id; }
  // Copies the entries (raft keeps its own until the append callback).
  void append(const raft_entry* entries, unsigned n);
  // Deletes the entries from `index` on.
  void truncate(raft_index index);
  // Copies the snapshot; keeps `trailing` entries before its index, or
  // none (trailing == 0: an installed snapshot replaces the whole log).
  int snapshot_put(unsigned trailing, const raft_snapshot& snapshot);
  // A copy of the last snapshot for raft (nullptr when there is none).
  raft_snapshot* snapshot_copy() const;

  raft_term term() const { return term_; }
  raft_id voted_for() const { return voted_for_; }
  raft_index start_index() const { return start_index_; }
  raft_index last_index() const { return start_index_ + entries_.size() - 1; }
  size_t num_entries() const { return entries_.size(); }

 private:
  struct Entry {
    raft_term term;
    unsigned short type;
    std::vector<uint8_t> data;
  };
  struct Snapshot {
    raft_index index = 0;
    raft_term term = 0;
    std::vector<raft_server> servers;  // addresses owned by `addresses`
    std::vector<std::vector<char>> addresses;
    raft_index configuration_index = 0;
    std::vector<uint8_t> data;
  };

  raft_term term_ = 0;
  raft_id voted_for_ = 0;
  raft_index start_index_ = 1;  // index of entries_[0]
  std::vector<Entry> entries_;
  std::unique_ptr<Snapshot> snapshot_;
};

}  // namespace smr
