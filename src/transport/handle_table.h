// Small integer handles for per-transport objects handed to the engine
// (exposures): freed handles are reused, so the table grows only to the
// most objects alive at once. No allocation once it has grown that far.
#pragma once

#include <cstdint>
#include <vector>

namespace rpc::detail {

template <typename T>
class HandleTable {
 public:
  uint32_t add(T value) {
    if (!free_.empty()) {
      const uint32_t handle = free_.back();
      free_.pop_back();
      values_[handle] = value;
      return handle;
    }
    values_.push_back(value);
    return static_cast<uint32_t>(values_.size() - 1);
  }
  // The value of a live handle, which is freed; T{} for any other handle.
  T take(uint32_t handle) {
    if (handle >= values_.size() || values_[handle] == T{}) return T{};
    const T value = values_[handle];
    values_[handle] = T{};
    free_.push_back(handle);
    return value;
  }
  // The value of a live handle, in place; nullptr for any other handle.
  T* get(uint32_t handle) {
    if (handle >= values_.size() || values_[handle] == T{}) return nullptr;
    return &values_[handle];
  }
  size_t live() const { return values_.size() - free_.size(); }
  // Calls f on every live value, in place.
  template <typename F>
  void for_each(F&& f) {
    for (T& value : values_) {
      if (value != T{}) f(value);
    }
  }
  // Calls f on every live value and forgets them all.
  template <typename F>
  void drain(F&& f) {
    for_each(f);
    values_.clear();
    free_.clear();
  }

 private:
  std::vector<T> values_;  // T{} where the handle is free
  std::vector<uint32_t> free_;
};

}  // namespace rpc::detail
