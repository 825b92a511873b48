// One partition's table: the keys a server Rpc owns, touched only by that
// Rpc's thread (partitioning by key is what lets it go without locks).
// std::unordered_map with heterogeneous lookup, so a GET looks a key up
// straight from the request bytes without building a std::string; chosen
// over Debian's libcuckoo by measurement (apps/kv/table_bench.cc,
// docs/apps.md "Choosing the table").
//
// Memory is bounded: the table refuses a PUT that would take what its
// entries cost past capacity_bytes (a client may send any number of keys).
// An entry costs its key and value bytes and what holding them costs the
// heap: the map's node and bucket, and a string's own allocation once it
// is too long to live in the node (entry_cost_bytes). Counting only key
// and value bytes, 300,000 PUTs of 3-byte keys with empty values were
// charged 900 kB and took 31 MB.
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

// What an entry of std::unordered_map<std::string, std::string> costs
// beyond its bytes, with libstdc++ on 64-bit Linux: the node (next pointer,
// the two strings, the cached hash: 80 bytes, a 96-byte malloc chunk) and
// about one bucket pointer per entry; rounded up for the allocator's slack.
inline constexpr size_t kEntryOverheadBytes = 112;
// Strings up to this long are stored in the string itself (libstdc++'s
// small-string buffer); longer ones take a heap chunk of their own.
inline constexpr size_t kInlineStringBytes = 15;

// The heap a string of `size` bytes takes beyond its node: its allocation
// (size + 1 for the terminator, the malloc header, 16-byte chunks).
constexpr size_t string_heap_bytes(size_t size) {
  return size <= kInlineStringBytes ? 0 : (size + 1 + 8 + 15) / 16 * 16;
}
// What the capacity is charged for an entry.
constexpr size_t entry_cost_bytes(size_t key_size, size_t value_size) {
  return kEntryOverheadBytes + key_size + value_size + string_heap_bytes(key_size) +
         string_heap_bytes(value_size);
}

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
      // An overwrite reuses the string's capacity when it fits, and
      // allocates anew otherwise; charged as a new entry either way.
      const size_t new_bytes = used_bytes_ - entry_cost_bytes(key.size(), it->second.size()) +
                               entry_cost_bytes(key.size(), value.size());
      if (new_bytes > capacity_bytes_) return false;
      it->second.assign(bytes, value.size());
      used_bytes_ = new_bytes;
      return true;
    }
    const size_t new_bytes = used_bytes_ + entry_cost_bytes(key.size(), value.size());
    if (new_bytes > capacity_bytes_) return false;
    map_.emplace(std::string(key), std::string(bytes, value.size()));
    used_bytes_ = new_bytes;
    return true;
  }
  bool erase(std::string_view key) {
    const auto it = map_.find(key);
    if (it == map_.end()) return false;
    used_bytes_ -= entry_cost_bytes(it->first.size(), it->second.size());
    map_.erase(it);
    return true;
  }

  size_t size() const { return map_.size(); }
  // What the entries cost (entry_cost_bytes: what the capacity counts).
  size_t used_bytes() const { return used_bytes_; }
  size_t capacity_bytes() const { return capacity_bytes_; }

 private:
  std::unordered_map<std::string, std::string, StringHash, std::equal_to<>> map_;
  size_t used_bytes_ = 0;
  size_t capacity_bytes_;
};

}  // namespace kv
