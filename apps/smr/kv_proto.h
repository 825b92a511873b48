// The smr key-value service's wire formats: a client command (also the
// payload of a raft log entry, so followers decode what leaders encoded),
// the reply a replica sends the client, and the snapshot of the store.
// Little-endian, length-checked; see docs/apps.md, "apps/smr".
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "librpc/types.h"

namespace smr {

inline constexpr rpc::ReqType kClientReqType = 21;
inline constexpr size_t kMaxKeyBytes = 256;
inline constexpr size_t kMaxValueBytes = 4096;

enum class KvOp : uint8_t { kPut = 1, kGet = 2 };

struct KvCommand {
  KvOp op = KvOp::kGet;
  std::string key;
  std::string value;  // kPut only
};

// op(1) key_len(2) value_len(4) key value, zeros to a multiple of 8 bytes
std::vector<uint8_t> encode_command(const KvCommand& c);
size_t encode_command(const KvCommand& c, uint8_t* out);  // returns bytes written
size_t command_size(const KvCommand& c);
// Refuses unknown ops, keys over kMaxKeyBytes, values over kMaxValueBytes,
// a value on a get, short input, and anything after the key and value but
// the zero padding to a multiple of 8 bytes.
std::optional<KvCommand> decode_command(std::span<const uint8_t> bytes);

enum class KvStatus : uint8_t {
  kOk = 0,
  kNotLeader = 1,  // not applied; leader_id/leader_address say where to go (0/"" unknown)
  kUnknown = 2,    // accepted, then leadership was lost: may or may not apply
  kBadRequest = 3,
  kBusy = 4,  // not applied (too many requests waiting)
};

struct KvReply {
  KvStatus status = KvStatus::kOk;
  uint64_t leader_id = 0;
  std::string leader_address;
  uint64_t index = 0;  // the log index the command was applied at
  bool found = false;  // get: the key exists
  std::string value;   // get: its value
};

// status(1) leader_id(8) index(8) found(1) addr_len(1) value_len(4) addr value
std::vector<uint8_t> encode_reply(const KvReply& r);
std::optional<KvReply> decode_reply(std::span<const uint8_t> bytes);
inline constexpr size_t kMaxReplyBytes = 1 + 8 + 8 + 1 + 1 + 4 + 255 + kMaxValueBytes;

using KvMap = std::unordered_map<std::string, std::string>;
// magic(4) count(8) then count x (key_len(2) value_len(4) key value)
std::vector<uint8_t> encode_snapshot(const KvMap& map);
std::optional<KvMap> decode_snapshot(std::span<const uint8_t> bytes);

}  // namespace smr
