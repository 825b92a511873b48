// KvFsm; see kv_fsm.h.
#include "kv_fsm.h"

#include <cstring>
#include <map>

namespace smr {

KvFsm::KvFsm() {
  fsm_.version = 1;  // raft owns (and frees) the buffers snapshot() returns
  fsm_.data = this;
  fsm_.apply = [](raft_fsm* fsm, const raft_buffer* buf, void** result) {
    KvFsm& s = self_of(fsm);
    s.result_ = KvResult{};
    *result = &s.result_;
    s.applied_++;
    auto cmd = decode_command({static_cast<const uint8_t*>(buf->base), buf->len});
    // A bad entry is answered, not fatal: an error here would make libraft
    // turn this replica unavailable, and the leader checked it already.
    if (!cmd) {
      s.result_.bad_command = true;
      return 0;
    }
    if (cmd->op == KvOp::kPut) {
      s.map_[cmd->key] = std::move(cmd->value);
    } else if (auto it = s.map_.find(cmd->key); it != s.map_.end()) {
      s.result_.found = true;
      s.result_.value = it->second;
    }
    return 0;
  };
  fsm_.snapshot = [](raft_fsm* fsm, raft_buffer* bufs[], unsigned* n_bufs) {
    KvFsm& s = self_of(fsm);
    const std::vector<uint8_t> bytes = encode_snapshot(s.map_);
    auto* array = static_cast<raft_buffer*>(raft_malloc(sizeof(raft_buffer)));
    void* base = raft_malloc(bytes.size());
    if (array == nullptr || base == nullptr) {
      raft_free(array);
      raft_free(base);
      return RAFT_NOMEM;
    }
    std::memcpy(base, bytes.data(), bytes.size());
    array[0] = raft_buffer{base, bytes.size()};
    *bufs = array;
    *n_bufs = 1;
    return 0;
  };
  fsm_.restore = [](raft_fsm* fsm, raft_buffer* buf) {
    KvFsm& s = self_of(fsm);
    auto map = decode_snapshot({static_cast<const uint8_t*>(buf->base), buf->len});
    if (!map) return RAFT_MALFORMED;  // libraft frees buf on failure
    s.map_ = std::move(*map);
    raft_free(buf->base);  // on success the buffer is ours (snapshot.c)
    return 0;
  };
}

uint64_t KvFsm::digest() const {
  const std::map<std::string, std::string> sorted(map_.begin(), map_.end());
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](const std::string& s) {
    for (const char c : s) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
    h = (h ^ 0xff) * 1099511628211ull;  // separator: ("ab","c") != ("a","bc")
  };
  for (const auto& [k, v] : sorted) {
    mix(k);
    mix(v);
  }
  return h;
}

}  // namespace smr
