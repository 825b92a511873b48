// A queue that any thread posts to and one owner thread drains. The owner
// checks a flag on every event-loop iteration without taking the lock, and
// takes everything posted so far in one swap. The Rpc keeps two: the SM
// messages and remote failures the Nexus delivers, and the responses of
// background handlers.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

namespace rpc::detail {

template <typename T>
class Mailbox {
 public:
  // Any thread. A `limited` item is refused (false) while `limit` limited
  // items already wait: a sender that floods the mailbox is capped without
  // losing the items that must never be dropped (the unlimited ones).
  bool post(T item, bool limited = false, size_t limit = SIZE_MAX) {
    std::lock_guard lock(mutex_);
    if (limited) {
      if (limited_waiting_ >= limit) return false;
      limited_waiting_++;
    }
    items_.push_back(std::move(item));
    pending_.store(true, std::memory_order_release);
    return true;
  }

  // Owner thread: whether anything waits. Lock-free; a post racing with it
  // is seen on the next call.
  bool pending() const { return pending_.load(std::memory_order_acquire); }

  // Owner thread: everything posted so far, in order, into `out` (emptied
  // first; the two vectors trade buffers, so neither reallocates once warm).
  void take_all(std::vector<T>& out) {
    out.clear();
    std::lock_guard lock(mutex_);
    out.swap(items_);
    limited_waiting_ = 0;
    pending_.store(false, std::memory_order_release);
  }

 private:
  std::mutex mutex_;
  std::vector<T> items_;
  size_t limited_waiting_ = 0;
  std::atomic<bool> pending_{false};
};

}  // namespace rpc::detail
