// One partition's table: the keys a server Rpc owns, touched only by that
// Rpc's thread (partitioning by key is what lets it go without locks).
// std::unordered_map with heterogeneous lookup, so a GET looks a key up
// straight from the request bytes without building a std::string; chosen
// over Debian's libcuckoo by measurement (apps/kv/table_bench.cc,
// docs/apps.md "Choosing the table").
//
// Memory is bounded: the table refuses a PUT that would take its keys and
// values past capacity_bytes (a client may send any number of keys).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>

namespace kv {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

class Table {
 public:
  explicit Table(size_t capacity_bytes) : capacity_bytes_(capacity_bytes) {}

  // The value, or nullptr. Valid until the next put or erase.
  const std::string* get(std::string_view key) const {
    const auto it = map_.find(key);
    return it == map_.end() ? nullptr : &it->second;
  }
  // false (nothing changed) when it would exceed the capacity.
  bool put(std::string_view key, std::span<const uint8_t> value) {
    const char* bytes = reinterpret_cast<const char*>(value.data());
    if (auto it = map_.find(key); it != map_.end()) {
      const size_t new_bytes = used_bytes_ - it->second.size() + value.size();
      if (new_bytes > capacity_bytes_) return false;
      it->second.assign(bytes, value.size());  // reuses the string's capacity
      used_bytes_ = new_bytes;
      return true;
    }
    const size_t new_bytes = used_bytes_ + key.size() + value.size();
    if (new_bytes > capacity_bytes_) return false;
    map_.emplace(std::string(key), std::string(bytes, value.size()));
    used_bytes_ = new_bytes;
    return true;
  }
  bool erase(std::string_view key) {
    const auto it = map_.find(key);
    if (it == map_.end()) return false;
    used_bytes_ -= it->first.size() + it->second.size();
    map_.erase(it);
    return true;
  }

  size_t size() const { return map_.size(); }
  // Key and value bytes held (what the capacity counts).
  size_t used_bytes() const { return used_bytes_; }
  size_t capacity_bytes() const { return capacity_bytes_; }

 private:
  std::unordered_map<std::string, std::string, StringHash, std::equal_to<>> map_;
  size_t used_bytes_ = 0;
  size_t capacity_bytes_;
};

}  // namespace kv
