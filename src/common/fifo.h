// A first-in first-out queue that allocates nothing until the first push
// (libstdc++'s std::deque allocates about 600 bytes when constructed, which
// an idle session of a server with tens of thousands of them cannot
// afford). Amortized O(1): taken entries are dropped from the front once
// they are half the storage.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

namespace rpc::detail {

template <typename T>
class Fifo {
 public:
  bool empty() const { return head_ == items_.size(); }
  size_t size() const { return items_.size() - head_; }
  void push_back(T&& item) { items_.push_back(std::move(item)); }
  // REQUIRES: !empty().
  const T& front() const { return items_[head_]; }
  T& front() { return items_[head_]; }
  // REQUIRES: !empty(). Removes the first item and returns it.
  T take_front() {
    T item = std::move(items_[head_]);
    pop_front();
    return item;
  }
  // Removes the items `pred` holds for, in order, appending them to `out`.
  // O(size); for rare events (a cancel, an expired deadline).
  template <typename Pred, typename Out>
  void take_if(Pred pred, Out& out) {
    auto keep = items_.begin() + static_cast<std::ptrdiff_t>(head_);
    for (auto it = keep; it != items_.end(); ++it) {
      if (pred(*it)) {
        out.push_back(std::move(*it));
      } else {
        if (it != keep) *keep = std::move(*it);
        ++keep;
      }
    }
    items_.erase(keep, items_.end());
    if (head_ == items_.size()) {
      items_.clear();
      head_ = 0;
    }
  }
  void pop_front() {
    head_++;
    if (head_ == items_.size()) {
      items_.clear();
      head_ = 0;
    } else if (head_ >= 32 && head_ * 2 >= items_.size()) {
      items_.erase(items_.begin(), items_.begin() + static_cast<std::ptrdiff_t>(head_));
      head_ = 0;
    }
  }

 private:
  std::vector<T> items_;
  size_t head_ = 0;
};

}  // namespace rpc::detail
