// A first-in first-out queue that allocates nothing until the first push
// (libstdc++'s std::deque allocates about 600 bytes when constructed, which
// an idle session of a server with tens of thousands of them cannot
// afford). Amortized O(1): taken entries are dropped from the front once
// they are half the storage.
#pragma once

#include <cstddef>
#include <vector>

namespace rpc::detail {

template <typename T>
class Fifo {
 public:
  bool empty() const { return head_ == items_.size(); }
  size_t size() const { return items_.size() - head_; }
  void push_back(const T& item) { items_.push_back(item); }
  // REQUIRES: !empty().
  const T& front() const { return items_[head_]; }
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
