#include "service.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <span>

#include "protocol.h"

namespace kv {

namespace {

Partition& partition(rpc::ReqHandle& h) { return *static_cast<Partition*>(h.context()); }

std::span<const uint8_t> request_bytes(const rpc::ReqHandle& h) {
  return {h.request().data(), h.request().size()};
}

void refuse(rpc::ReqHandle& h, KvError error) {
  partition(h).refused++;
  h.rpc().enqueue_error_response(h, static_cast<uint32_t>(error));
}

void respond_status(rpc::ReqHandle& h, Status status) {
  rpc::MsgBuffer& resp = h.pre_resp_buffer();
  resp.data()[0] = static_cast<uint8_t>(status);
  resp.resize(kStatusBytes);
  h.rpc().enqueue_response(h, resp);
}

// The key's owner check: a client that hashes keys differently (or a peer
// making things up) must not scatter one key over several tables.
bool owns(rpc::ReqHandle& h, std::string_view key) {
  const Partition& p = partition(h);
  return partition_of(key, p.partitions) == p.index;
}

void handle_get(rpc::ReqHandle& h) {
  KvError error{};
  const std::optional<Request> req = decode_key_request(request_bytes(h), &error);
  if (!req) return refuse(h, error);
  if (!owns(h, req->key)) return refuse(h, KvError::kWrongPartition);
  const std::string* value = partition(h).table.get(req->key);
  if (value == nullptr) return respond_status(h, Status::kNotFound);

  // Small values go in the preallocated one-packet buffer; larger ones in a
  // buffer the Rpc frees once the response is delivered.
  const size_t resp_bytes = kStatusBytes + value->size();
  rpc::MsgBuffer& pre = h.pre_resp_buffer();
  const bool fits = resp_bytes <= pre.max_size();
  rpc::MsgBuffer big = fits ? rpc::MsgBuffer() : h.rpc().alloc_msg_buffer(resp_bytes);
  if (!fits && !big.valid()) return refuse(h, KvError::kNoMemory);
  rpc::MsgBuffer& resp = fits ? pre : big;
  resp.resize(resp_bytes);
  resp.data()[0] = static_cast<uint8_t>(Status::kFound);
  std::memcpy(resp.data() + kStatusBytes, value->data(), value->size());
  h.rpc().enqueue_response(h, resp);
}

void handle_put(rpc::ReqHandle& h) {
  KvError error{};
  const std::optional<Request> req = decode_put_request(request_bytes(h), &error);
  if (!req) return refuse(h, error);
  if (!owns(h, req->key)) return refuse(h, KvError::kWrongPartition);
  if (!partition(h).table.put(req->key, req->value)) return refuse(h, KvError::kFull);
  respond_status(h, Status::kStored);
}

void handle_delete(rpc::ReqHandle& h) {
  KvError error{};
  const std::optional<Request> req = decode_key_request(request_bytes(h), &error);
  if (!req) return refuse(h, error);
  if (!owns(h, req->key)) return refuse(h, KvError::kWrongPartition);
  respond_status(h, partition(h).table.erase(req->key) ? Status::kDeleted : Status::kNotFound);
}

void handle_info(rpc::ReqHandle& h) {
  if (h.request().size() != 0) return refuse(h, KvError::kMalformed);
  rpc::MsgBuffer& resp = h.pre_resp_buffer();
  encode_info(Info{.partitions = partition(h).partitions,
                   .max_value_bytes = static_cast<uint32_t>(kMaxValueBytes)},
              resp.data());
  resp.resize(kInfoResponseBytes);
  h.rpc().enqueue_response(h, resp);
}

}  // namespace

rpc::Result<void> register_handlers(rpc::Nexus& nexus) {
  const std::pair<rpc::ReqType, void (*)(rpc::ReqHandle&)> handlers[] = {
      {kGetReqType, handle_get},
      {kPutReqType, handle_put},
      {kDeleteReqType, handle_delete},
      {kInfoReqType, handle_info}};
  for (const auto& [type, handler] : handlers) {
    if (auto ok = nexus.register_handler(type, handler); !ok) return ok;
  }
  return {};
}

}  // namespace kv
