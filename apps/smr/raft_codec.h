// Raft messages on the wire between replicas: libraft's struct raft_message
// encoded into a librpc request body and decoded back. Explicit
// little-endian, every length checked: a peer is not trusted, so decode()
// refuses truncated, oversized, trailing or out-of-range input instead of
// handing it to libraft (which asserts, or turns unavailable, on bad input).
// The format is in docs/apps.md, "apps/smr".
#pragma once

#include "raft_c.h"

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace smr {

inline constexpr uint32_t kRaftMsgMagic = 0x31524d53;  // "SMR1"
inline constexpr uint8_t kRaftMsgVersion = 1;
// magic(4) version(1) type(1) reserved(2) sender(8) destination(8)
inline constexpr size_t kRaftMsgHeaderBytes = 24;
// Bounds a decoder enforces on what a peer may claim.
inline constexpr uint32_t kMaxEntriesPerMsg = 1u << 20;
inline constexpr uint32_t kMaxConfServers = 64;
inline constexpr size_t kMaxAddressBytes = 255;

// A decoded message and the libraft allocations behind it (entries array,
// one batch holding every entry's data, snapshot data and configuration).
// Until release() the DecodedMsg owns them and frees them when destroyed;
// after handing `msg` to libraft's recv callback call release(), since
// libraft then owns them (recv.c frees them on every path).
class DecodedMsg {
 public:
  DecodedMsg();
  ~DecodedMsg();
  DecodedMsg(DecodedMsg&& other) noexcept;
  DecodedMsg& operator=(DecodedMsg&&) = delete;
  DecodedMsg(const DecodedMsg&) = delete;
  DecodedMsg& operator=(const DecodedMsg&) = delete;

  raft_message msg;
  raft_id destination = 0;
  void release() { owned_ = false; }
  void free_payload();

 private:
  friend bool decode(std::span<const uint8_t>, DecodedMsg&, std::string*);
  bool owned_ = false;
};

// Bytes encode() needs for `msg` when an AppendEntries carries its first
// n_entries entries only (ignored for other types).
size_t encoded_size(const raft_message& msg, unsigned n_entries);
// The largest prefix of msg's AppendEntries entries that encodes within
// max_bytes (all of them when they fit); 0 entries when even one does not.
// For other types: 0.
unsigned entries_that_fit(const raft_message& msg, size_t max_bytes);
// The AppendEntries to put on the wire when it carries its first n_entries
// entries: leader_commit capped at prev_log_index + n_entries (other types
// unchanged). libraft 0.15's follower sets its commit index to
// min(leader_commit, its own last index), which counts entries past the
// ones the message carries: leftovers of an old term that the leader has
// not matched yet (fixed upstream in 0.17.1). Capped, a follower commits
// only entries this message has just matched with the leader's log.
raft_message wire_message(const raft_message& msg, unsigned n_entries);
// Writes the message from `sender` to msg.server_id into out, which must
// hold encoded_size(msg, n_entries) bytes; returns the bytes written.
size_t encode(const raft_message& msg, raft_id sender, unsigned n_entries, uint8_t* out);

// Decodes bytes into out (replacing nothing: out must be fresh). On
// failure returns false, frees what it allocated and says why in *why.
// On success out.msg.server_id is the sender; server_address is nullptr
// (the caller fills it from its own configuration, not from the wire).
bool decode(std::span<const uint8_t> bytes, DecodedMsg& out, std::string* why = nullptr);

// For fuzzers: decode arbitrary bytes; whatever is accepted must re-encode
// to the same bytes. Aborts on a violation. Returns whether it decoded.
bool fuzz_decode_roundtrip(const uint8_t* data, size_t size);

}  // namespace smr
