// A timing wheel, after Carousel (Saeed et al., SIGCOMM 2017) as eRPC paces
// with it: each entry is due at a time, and reap() hands out, in time
// order, the entries whose time has come. The wheel is a ring of slots of
// slot_ns each; a slot's entries become due when the slot ends, so no entry
// is ever early and none is more than one slot late. Entries further ahead
// than the horizon (num_slots - 1 slots) are due at the horizon: a paced
// session schedules at most a few packets ahead.
//
// The engine's pacer when RpcConfig::congestion_control is on (rpc/cc.cc);
// unit-tested in test/test_timely.cc. Storage grows to the largest number of entries
// a slot ever held and is then reused: no allocation in steady state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace rpc::detail {

class TimingWheel {
 public:
  // REQUIRES: slot_ns > 0, num_slots >= 2.
  TimingWheel(uint64_t slot_ns, size_t num_slots, uint64_t now_ns);

  // Adds `item`, due at due_ns (an earlier time is due now: at the end of
  // the current slot). now_ns must not go backwards between calls.
  void insert(uint64_t item, uint64_t due_ns, uint64_t now_ns);
  // Appends every entry due by now_ns to `out`, earliest slot first and in
  // insertion order within a slot; returns how many.
  size_t reap(uint64_t now_ns, std::vector<uint64_t>& out);
  size_t size() const { return size_; }
  uint64_t horizon_ns() const { return slot_ns_ * (slots_.size() - 1); }

 private:
  // Moves the current slot on until it ends after now_ns, collecting the
  // entries of the slots that ended into due_.
  void advance(uint64_t now_ns);

  uint64_t slot_ns_;
  std::vector<std::vector<uint64_t>> slots_;
  size_t cur_ = 0;             // the slot that ends at cur_end_ns_
  uint64_t cur_end_ns_;        // > the last now_ns seen
  std::vector<uint64_t> due_;  // reaped by advance(), not yet handed out
  size_t size_ = 0;            // entries in slots_ and due_
};

}  // namespace rpc::detail
