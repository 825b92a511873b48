// Encoding of libraft messages; see raft_codec.h.
#include "raft_codec.h"

#include <cstdlib>
#include <cstring>
#include <vector>

#include "byte_io.h"

namespace smr {

namespace {

// Per-type body sizes (after the header), entries and blobs aside.
constexpr size_t kRequestVoteBytes = 4 * 8 + 1;
constexpr size_t kRequestVoteResultBytes = 8 + 1 + 1;
constexpr size_t kAppendEntriesBytes = 4 * 8 + 4;
constexpr size_t kEntryHeaderBytes = 8 + 1 + 4;
constexpr size_t kAppendEntriesResultBytes = 3 * 8;
constexpr size_t kInstallSnapshotBytes = 4 * 8 + 4 + 8;
constexpr size_t kServerHeaderBytes = 8 + 1 + 1;
constexpr size_t kTimeoutNowBytes = 3 * 8;

size_t conf_size(const raft_configuration& conf) {
  size_t n = 0;
  for (unsigned i = 0; i < conf.n; i++) {
    n += kServerHeaderBytes + std::strlen(conf.servers[i].address);
  }
  return n;
}

void fail_why(std::string* why, const char* text) {
  if (why != nullptr) *why = text;
}

}  // namespace

DecodedMsg::DecodedMsg() { std::memset(&msg, 0, sizeof msg); }

DecodedMsg::~DecodedMsg() { free_payload(); }

DecodedMsg::DecodedMsg(DecodedMsg&& other) noexcept
    : msg(other.msg), destination(other.destination), owned_(other.owned_) {
  other.owned_ = false;
}

void DecodedMsg::free_payload() {
  if (!owned_) return;
  owned_ = false;
  if (msg.type == RAFT_IO_APPEND_ENTRIES && msg.append_entries.entries != nullptr) {
    raft_free(msg.append_entries.entries[0].batch);
    raft_free(msg.append_entries.entries);
    msg.append_entries.entries = nullptr;
  } else if (msg.type == RAFT_IO_INSTALL_SNAPSHOT) {
    raft_configuration_close(&msg.install_snapshot.conf);
    raft_free(msg.install_snapshot.data.base);
    msg.install_snapshot.data.base = nullptr;
  }
}

size_t encoded_size(const raft_message& msg, unsigned n_entries) {
  size_t n = kRaftMsgHeaderBytes;
  switch (msg.type) {
    case RAFT_IO_REQUEST_VOTE:
      return n + kRequestVoteBytes;
    case RAFT_IO_REQUEST_VOTE_RESULT:
      return n + kRequestVoteResultBytes;
    case RAFT_IO_APPEND_ENTRIES:
      n += kAppendEntriesBytes;
      for (unsigned i = 0; i < n_entries; i++) {
        n += kEntryHeaderBytes + msg.append_entries.entries[i].buf.len;
      }
      return n;
    case RAFT_IO_APPEND_ENTRIES_RESULT:
      return n + kAppendEntriesResultBytes;
    case RAFT_IO_INSTALL_SNAPSHOT:
      return n + kInstallSnapshotBytes + conf_size(msg.install_snapshot.conf) +
             msg.install_snapshot.data.len;
    case RAFT_IO_TIMEOUT_NOW:
      return n + kTimeoutNowBytes;
    default:
      return 0;
  }
}

unsigned entries_that_fit(const raft_message& msg, size_t max_bytes) {
  if (msg.type != RAFT_IO_APPEND_ENTRIES) return 0;
  size_t n = kRaftMsgHeaderBytes + kAppendEntriesBytes;
  unsigned i = 0;
  for (; i < msg.append_entries.n_entries && i < kMaxEntriesPerMsg; i++) {
    n += kEntryHeaderBytes + msg.append_entries.entries[i].buf.len;
    if (n > max_bytes) break;
  }
  return i;
}

raft_message wire_message(const raft_message& msg, unsigned n_entries) {
  raft_message out = msg;
  if (msg.type == RAFT_IO_APPEND_ENTRIES) {
    const raft_index matched = msg.append_entries.prev_log_index + n_entries;
    if (out.append_entries.leader_commit > matched) out.append_entries.leader_commit = matched;
  }
  return out;
}

size_t encode(const raft_message& msg, raft_id sender, unsigned n_entries, uint8_t* out) {
  ByteWriter w(out);
  w.u32(kRaftMsgMagic);
  w.u8(kRaftMsgVersion);
  w.u8(static_cast<uint8_t>(msg.type));
  w.u16(0);
  w.u64(sender);
  w.u64(msg.server_id);
  switch (msg.type) {
    case RAFT_IO_REQUEST_VOTE: {
      const auto& m = msg.request_vote;
      w.u64(m.term);
      w.u64(m.candidate_id);
      w.u64(m.last_log_index);
      w.u64(m.last_log_term);
      w.u8(static_cast<uint8_t>((m.disrupt_leader ? 1 : 0) | (m.pre_vote ? 2 : 0)));
      break;
    }
    case RAFT_IO_REQUEST_VOTE_RESULT: {
      const auto& m = msg.request_vote_result;
      w.u64(m.term);
      w.u8(m.vote_granted ? 1 : 0);
      w.u8(static_cast<uint8_t>(m.pre_vote));
      break;
    }
    case RAFT_IO_APPEND_ENTRIES: {
      const auto& m = msg.append_entries;
      w.u64(m.term);
      w.u64(m.prev_log_index);
      w.u64(m.prev_log_term);
      w.u64(m.leader_commit);
      w.u32(n_entries);
      for (unsigned i = 0; i < n_entries; i++) {
        const raft_entry& e = m.entries[i];
        w.u64(e.term);
        w.u8(static_cast<uint8_t>(e.type));
        w.u32(static_cast<uint32_t>(e.buf.len));
        w.bytes(e.buf.base, e.buf.len);
      }
      break;
    }
    case RAFT_IO_APPEND_ENTRIES_RESULT: {
      const auto& m = msg.append_entries_result;
      w.u64(m.term);
      w.u64(m.rejected);
      w.u64(m.last_log_index);
      break;
    }
    case RAFT_IO_INSTALL_SNAPSHOT: {
      const auto& m = msg.install_snapshot;
      w.u64(m.term);
      w.u64(m.last_index);
      w.u64(m.last_term);
      w.u64(m.conf_index);
      w.u32(m.conf.n);
      for (unsigned i = 0; i < m.conf.n; i++) {
        const raft_server& s = m.conf.servers[i];
        const size_t len = std::strlen(s.address);
        w.u64(s.id);
        w.u8(static_cast<uint8_t>(s.role));
        w.u8(static_cast<uint8_t>(len));
        w.bytes(s.address, len);
      }
      w.u64(m.data.len);
      w.bytes(m.data.base, m.data.len);
      break;
    }
    case RAFT_IO_TIMEOUT_NOW: {
      const auto& m = msg.timeout_now;
      w.u64(m.term);
      w.u64(m.last_log_index);
      w.u64(m.last_log_term);
      break;
    }
    default:
      break;
  }
  return static_cast<size_t>(w.pos() - out);
}

namespace {

bool decode_entries(ByteReader& r, raft_append_entries& m, std::string* why) {
  const uint32_t n = r.u32();
  if (!r.ok()) return fail_why(why, "truncated append entries"), false;
  if (n > kMaxEntriesPerMsg) return fail_why(why, "too many entries"), false;
  // Each entry takes at least its header: a cheap bound before allocating.
  if (static_cast<size_t>(n) * kEntryHeaderBytes > r.remaining()) {
    return fail_why(why, "entry count exceeds the message"), false;
  }
  m.n_entries = n;
  m.entries = nullptr;
  if (n == 0) return true;
  // First pass: validate and size the batch; second pass: copy.
  ByteReader probe = r;
  size_t total = 0;
  for (uint32_t i = 0; i < n; i++) {
    const uint64_t term = probe.u64();
    const uint8_t type = probe.u8();
    const uint32_t len = probe.u32();
    probe.bytes(len);
    if (!probe.ok()) return fail_why(why, "truncated entry"), false;
    if (term == 0) return fail_why(why, "entry with term 0"), false;
    if (type < RAFT_COMMAND || type > RAFT_CHANGE) return fail_why(why, "bad entry type"), false;
    total += len;
  }
  auto* entries = static_cast<raft_entry*>(raft_calloc(n, sizeof(raft_entry)));
  auto* batch = static_cast<uint8_t*>(raft_malloc(total == 0 ? 1 : total));
  if (entries == nullptr || batch == nullptr) {
    raft_free(entries);
    raft_free(batch);
    return fail_why(why, "out of memory"), false;
  }
  size_t off = 0;
  for (uint32_t i = 0; i < n; i++) {
    raft_entry& e = entries[i];
    e.term = r.u64();
    e.type = r.u8();
    const uint32_t len = r.u32();
    auto data = r.bytes(len);
    if (len != 0) std::memcpy(batch + off, data.data(), len);
    e.buf.base = batch + off;
    e.buf.len = len;
    e.batch = batch;
    off += len;
  }
  m.entries = entries;
  return true;
}

bool decode_snapshot(ByteReader& r, raft_install_snapshot& m, std::string* why) {
  m.term = r.u64();
  m.last_index = r.u64();
  m.last_term = r.u64();
  m.conf_index = r.u64();
  const uint32_t n = r.u32();
  if (!r.ok()) return fail_why(why, "truncated install snapshot"), false;
  if (n == 0 || n > kMaxConfServers) return fail_why(why, "bad configuration size"), false;
  raft_configuration_init(&m.conf);
  for (uint32_t i = 0; i < n; i++) {
    const uint64_t id = r.u64();
    const uint8_t role = r.u8();
    const uint8_t len = r.u8();
    const std::string address(r.str(len));
    if (!r.ok()) return fail_why(why, "truncated configuration"), false;
    if (address.empty() || address.find('\0') != std::string::npos) {
      return fail_why(why, "bad server address"), false;
    }
    // raft_configuration_add refuses id 0, bad roles and duplicates.
    if (raft_configuration_add(&m.conf, id, address.c_str(), role) != 0) {
      return fail_why(why, "bad configuration server"), false;
    }
  }
  const uint64_t len = r.u64();
  if (!r.ok() || len != r.remaining()) return fail_why(why, "bad snapshot data length"), false;
  auto data = r.bytes(static_cast<size_t>(len));
  m.data.base = raft_malloc(len == 0 ? 1 : static_cast<size_t>(len));
  if (m.data.base == nullptr) return fail_why(why, "out of memory"), false;
  if (len != 0) std::memcpy(m.data.base, data.data(), static_cast<size_t>(len));
  m.data.len = static_cast<size_t>(len);
  return true;
}

}  // namespace

bool decode(std::span<const uint8_t> bytes, DecodedMsg& out, std::string* why) {
  ByteReader r(bytes);
  const uint32_t magic = r.u32();
  const uint8_t version = r.u8();
  const uint8_t type = r.u8();
  const uint16_t reserved = r.u16();
  const uint64_t sender = r.u64();
  const uint64_t destination = r.u64();
  if (!r.ok()) return fail_why(why, "shorter than a header"), false;
  if (magic != kRaftMsgMagic) return fail_why(why, "bad magic"), false;
  if (version != kRaftMsgVersion) return fail_why(why, "unknown version"), false;
  if (reserved != 0) return fail_why(why, "reserved bits set"), false;
  if (sender == 0 || destination == 0) return fail_why(why, "server id 0"), false;
  raft_message& m = out.msg;
  std::memset(&m, 0, sizeof m);
  m.type = type;
  m.server_id = sender;
  out.destination = destination;
  switch (type) {
    case RAFT_IO_REQUEST_VOTE: {
      auto& v = m.request_vote;
      v.term = r.u64();
      v.candidate_id = r.u64();
      v.last_log_index = r.u64();
      v.last_log_term = r.u64();
      const uint8_t flags = r.u8();
      if (flags > 3) return fail_why(why, "bad vote flags"), false;
      v.disrupt_leader = (flags & 1) != 0;
      v.pre_vote = (flags & 2) != 0;
      break;
    }
    case RAFT_IO_REQUEST_VOTE_RESULT: {
      auto& v = m.request_vote_result;
      v.term = r.u64();
      const uint8_t granted = r.u8();
      const uint8_t pre_vote = r.u8();
      if (granted > 1 || pre_vote > raft_tribool_false) {
        return fail_why(why, "bad vote result flags"), false;
      }
      v.vote_granted = granted == 1;
      v.pre_vote = static_cast<raft_tribool>(pre_vote);
      break;
    }
    case RAFT_IO_APPEND_ENTRIES: {
      auto& a = m.append_entries;
      a.term = r.u64();
      a.prev_log_index = r.u64();
      a.prev_log_term = r.u64();
      a.leader_commit = r.u64();
      if (!decode_entries(r, a, why)) return false;
      out.owned_ = true;  // from here on, failure frees the entries
      break;
    }
    case RAFT_IO_APPEND_ENTRIES_RESULT: {
      auto& a = m.append_entries_result;
      a.term = r.u64();
      a.rejected = r.u64();
      a.last_log_index = r.u64();
      break;
    }
    case RAFT_IO_INSTALL_SNAPSHOT: {
      out.owned_ = true;  // frees a partly built configuration on failure
      if (!decode_snapshot(r, m.install_snapshot, why)) {
        out.free_payload();
        return false;
      }
      break;
    }
    case RAFT_IO_TIMEOUT_NOW: {
      auto& t = m.timeout_now;
      t.term = r.u64();
      t.last_log_index = r.u64();
      t.last_log_term = r.u64();
      break;
    }
    default:
      return fail_why(why, "unknown message type"), false;
  }
  if (!r.at_end()) {
    out.free_payload();
    return fail_why(why, r.ok() ? "trailing bytes" : "truncated message"), false;
  }
  return true;
}

bool fuzz_decode_roundtrip(const uint8_t* data, size_t size) {
  DecodedMsg d;
  if (!decode({data, size}, d)) return false;
  raft_message m = d.msg;
  m.server_id = d.destination;
  const unsigned n = m.type == RAFT_IO_APPEND_ENTRIES ? m.append_entries.n_entries : 0;
  std::vector<uint8_t> again(encoded_size(m, n));
  const size_t written = encode(m, d.msg.server_id, n, again.data());
  if (written != size || std::memcmp(again.data(), data, size) != 0) std::abort();
  return true;
}

}  // namespace smr
