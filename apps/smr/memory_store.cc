// MemoryStore; see memory_store.h.
#include "memory_store.h"

#include <cstring>

namespace smr {

MemoryStore::~MemoryStore() = default;

int MemoryStore::load(raft_term* term, raft_id* voted_for, raft_snapshot** snapshot,
                      raft_index* start_index, raft_entry** entries, size_t* n_entries) const {
  *term = term_;
  *voted_for = voted_for_;
  *snapshot = nullptr;
  *entries = nullptr;
  *n_entries = 0;
  *start_index = start_index_;
  if (snapshot_ != nullptr) {
    *snapshot = snapshot_copy();
    if (*snapshot == nullptr) return RAFT_NOMEM;
  }
  if (entries_.empty()) return 0;
  // One batch for all the data: raft frees it once no entry refers to it.
  size_t total = 0;
  for (const Entry& e : entries_) total += e.data.size();
  auto* out = static_cast<raft_entry*>(raft_calloc(entries_.size(), sizeof(raft_entry)));
  auto* batch = static_cast<uint8_t*>(raft_malloc(total == 0 ? 1 : total));
  if (out == nullptr || batch == nullptr) {
    raft_free(out);
    raft_free(batch);
    return RAFT_NOMEM;
  }
  size_t off = 0;
  for (size_t i = 0; i < entries_.size(); i++) {
    const Entry& e = entries_[i];
    out[i].term = e.term;
    out[i].type = e.type;
    if (!e.data.empty()) std::memcpy(batch + off, e.data.data(), e.data.size());
    out[i].buf.base = batch + off;
    out[i].buf.len = e.data.size();
    out[i].batch = batch;
    off += e.data.size();
  }
  *entries = out;
  *n_entries = entries_.size();
  return 0;
}

int MemoryStore::bootstrap(const raft_configuration& conf) {
  if (term_ != 0 || !entries_.empty() || snapshot_ != nullptr) return RAFT_CANTBOOTSTRAP;
  raft_buffer buf{};
  if (const int rv = raft_configuration_encode(&conf, &buf); rv != 0) return rv;
  Entry e{1, RAFT_CHANGE, {}};
  e.data.assign(static_cast<uint8_t*>(buf.base), static_cast<uint8_t*>(buf.base) + buf.len);
  raft_free(buf.base);
  entries_.push_back(std::move(e));
  start_index_ = 1;
  term_ = 1;
  voted_for_ = 0;
  return 0;
}

void MemoryStore::append(const raft_entry* entries, unsigned n) {
  for (unsigned i = 0; i < n; i++) {
    const auto* p = static_cast<const uint8_t*>(entries[i].buf.base);
    entries_.push_back(Entry{entries[i].term, entries[i].type, {p, p + entries[i].buf.len}});
  }
}

void MemoryStore::truncate(raft_index index) {
  if (index < start_index_) {
    entries_.clear();
    return;
  }
  const raft_index keep = index - start_index_;
  if (keep < entries_.size()) entries_.resize(static_cast<size_t>(keep));
}

int MemoryStore::snapshot_put(unsigned trailing, const raft_snapshot& s) {
  auto copy = std::make_unique<Snapshot>();
  copy->index = s.index;
  copy->term = s.term;
  copy->configuration_index = s.configuration_index;
  for (unsigned i = 0; i < s.configuration.n; i++) {
    const raft_server& src = s.configuration.servers[i];
    const size_t len = std::strlen(src.address);
    copy->addresses.emplace_back(src.address, src.address + len + 1);
    copy->servers.push_back(raft_server{src.id, nullptr, src.role});
  }
  for (size_t i = 0; i < copy->servers.size(); i++) {
    copy->servers[i].address = copy->addresses[i].data();
  }
  for (unsigned i = 0; i < s.n_bufs; i++) {
    const auto* p = static_cast<const uint8_t*>(s.bufs[i].base);
    copy->data.insert(copy->data.end(), p, p + s.bufs[i].len);
  }
  snapshot_ = std::move(copy);
  if (trailing == 0) {
    entries_.clear();
    start_index_ = s.index + 1;
    return 0;
  }
  // Keep the `trailing` entries up to the snapshot's index, and any after.
  const raft_index first_kept = s.index > trailing ? s.index - trailing + 1 : 1;
  if (first_kept > start_index_) {
    const raft_index drop = first_kept - start_index_;
    if (drop >= entries_.size()) {
      entries_.clear();
    } else {
      entries_.erase(entries_.begin(), entries_.begin() + static_cast<std::ptrdiff_t>(drop));
    }
    start_index_ = first_kept;
  }
  return 0;
}

raft_snapshot* MemoryStore::snapshot_copy() const {
  if (snapshot_ == nullptr) return nullptr;
  auto* s = static_cast<raft_snapshot*>(raft_calloc(1, sizeof(raft_snapshot)));
  if (s == nullptr) return nullptr;
  s->index = snapshot_->index;
  s->term = snapshot_->term;
  s->configuration_index = snapshot_->configuration_index;
  raft_configuration_init(&s->configuration);
  for (const raft_server& srv : snapshot_->servers) {
    if (raft_configuration_add(&s->configuration, srv.id, srv.address, srv.role) != 0) {
      raft_configuration_close(&s->configuration);
      raft_free(s);
      return nullptr;
    }
  }
  s->bufs = static_cast<raft_buffer*>(raft_malloc(sizeof(raft_buffer)));
  const size_t len = snapshot_->data.size();
  void* base = raft_malloc(len == 0 ? 1 : len);
  if (s->bufs == nullptr || base == nullptr) {
    raft_free(base);
    raft_free(s->bufs);
    raft_configuration_close(&s->configuration);
    raft_free(s);
    return nullptr;
  }
  if (len != 0) std::memcpy(base, snapshot_->data.data(), len);
  s->bufs[0] = raft_buffer{base, len};
  s->n_bufs = 1;
  return s;
}

}  // namespace smr
