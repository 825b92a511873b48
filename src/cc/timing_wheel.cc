#include "cc/timing_wheel.h"

#include <algorithm>

namespace rpc::detail {

TimingWheel::TimingWheel(uint64_t slot_ns, size_t num_slots, uint64_t now_ns)
    : slot_ns_(slot_ns), slots_(num_slots), cur_end_ns_(now_ns + slot_ns) {}

void TimingWheel::advance(uint64_t now_ns) {
  // A long idle gap: at most one turn of the wheel holds entries, so the
  // turns beyond it are skipped in one step.
  if (now_ns >= cur_end_ns_ + slot_ns_ * slots_.size()) {
    for (size_t i = 0; i < slots_.size(); i++) {
      std::vector<uint64_t>& slot = slots_[(cur_ + i) % slots_.size()];
      due_.insert(due_.end(), slot.begin(), slot.end());
      slot.clear();
    }
    const uint64_t turns = (now_ns - cur_end_ns_) / slot_ns_ + 1;
    cur_ = static_cast<size_t>((cur_ + turns) % slots_.size());
    cur_end_ns_ += turns * slot_ns_;
    return;
  }
  while (cur_end_ns_ <= now_ns) {
    std::vector<uint64_t>& slot = slots_[cur_];
    due_.insert(due_.end(), slot.begin(), slot.end());
    slot.clear();
    cur_ = cur_ + 1 == slots_.size() ? 0 : cur_ + 1;
    cur_end_ns_ += slot_ns_;
  }
}

void TimingWheel::insert(uint64_t item, uint64_t due_ns, uint64_t now_ns) {
  advance(now_ns);
  size_t ahead = 0;  // slots after the current one
  if (due_ns > cur_end_ns_) {
    ahead = static_cast<size_t>((due_ns - cur_end_ns_ + slot_ns_ - 1) / slot_ns_);
    ahead = std::min(ahead, slots_.size() - 1);
  }
  slots_[(cur_ + ahead) % slots_.size()].push_back(item);
  size_++;
}

size_t TimingWheel::reap(uint64_t now_ns, std::vector<uint64_t>& out) {
  advance(now_ns);
  const size_t n = due_.size();
  out.insert(out.end(), due_.begin(), due_.end());
  due_.clear();
  size_ -= n;
  return n;
}

}  // namespace rpc::detail
