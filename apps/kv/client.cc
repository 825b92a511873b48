#include "client.h"

#include <fmt/core.h>

#include <utility>

namespace kv {

namespace {

bool valid_key(std::string_view key) { return !key.empty() && key.size() <= kMaxKeyBytes; }

}  // namespace

std::optional<GetResult> parse_get_response(const rpc::MsgBuffer& resp, size_t resp_size) {
  if (resp_size < kStatusBytes) return std::nullopt;
  const auto status = static_cast<Status>(resp.data()[0]);
  if (status == Status::kNotFound && resp_size == kStatusBytes) return GetResult{};
  if (status != Status::kFound) return std::nullopt;
  return GetResult{.found = true, .value = {resp.data() + kStatusBytes, resp_size - kStatusBytes}};
}

std::optional<Status> parse_status_response(const rpc::MsgBuffer& resp, size_t resp_size) {
  if (resp_size != kStatusBytes) return std::nullopt;
  return static_cast<Status>(resp.data()[0]);
}

std::string describe_failure(const rpc::CallResult& r) {
  if (r.errc == rpc::Errc::kAppError) {
    return fmt::format("server refused: {}", to_string(static_cast<KvError>(r.app_error)));
  }
  return std::string(rpc::to_string(r.errc));
}

std::string describe_failure(const rpc::Completion& c) {
  return describe_failure(rpc::CallResult{c.errc, c.resp_size, c.app_error});
}

rpc::Result<Client> Client::connect(rpc::Rpc& rpc, const std::string& server_uri,
                                    std::chrono::milliseconds timeout) {
  auto first = rpc.connect(server_uri, 0, timeout);
  if (!first) {
    return rpc::Failure{
        fmt::format("cannot connect to rpc 0 at {}: {}", server_uri, first.error())};
  }
  rpc::OwnedBuffer req(rpc, 0), resp(rpc, kInfoResponseBytes);
  if (!req.valid() || !resp.valid()) return rpc::Failure{"cannot allocate message buffers"};
  const rpc::CallResult r = rpc::call_sync(rpc, *first, kInfoReqType, req, resp, timeout);
  if (!r.ok()) {
    return rpc::Failure{
        fmt::format("INFO request to {} failed: {}", server_uri, describe_failure(r))};
  }
  const std::optional<Info> info = decode_info({resp.data(), r.resp_size});
  if (!info) return rpc::Failure{fmt::format("{} sent a malformed INFO response", server_uri)};

  std::vector<rpc::SessionNum> sessions{*first};
  for (uint16_t p = 1; p < info->partitions; p++) {
    if (p >= rpc::kInvalidRpcId) {
      return rpc::Failure{fmt::format("{} claims {} partitions", server_uri, info->partitions)};
    }
    auto sn = rpc.connect(server_uri, static_cast<rpc::RpcId>(p), timeout);
    if (!sn) {
      return rpc::Failure{fmt::format("cannot connect to partition {} (rpc {}) at {}: {}", p, p,
                                      server_uri, sn.error())};
    }
    sessions.push_back(*sn);
  }
  return Client(rpc, std::move(sessions));
}

rpc::Errc Client::get(std::string_view key, rpc::MsgBuffer& req, rpc::MsgBuffer& resp,
                      rpc::ContinuationFn done) {
  if (!valid_key(key)) return rpc::Errc::kInvalidArgument;
  if (!req.valid() || req.max_size() < encoded_key_request_bytes(key))
    return rpc::Errc::kMsgTooLarge;
  req.resize(encode_key_request(key, req.data()));
  return rpc_->enqueue_request(session_for(key), kGetReqType, req, resp, std::move(done));
}

rpc::Errc Client::put(std::string_view key, std::span<const uint8_t> value, rpc::MsgBuffer& req,
                      rpc::MsgBuffer& resp, rpc::ContinuationFn done) {
  if (!valid_key(key) || value.size() > kMaxValueBytes) return rpc::Errc::kInvalidArgument;
  if (!req.valid() || req.max_size() < encoded_put_request_bytes(key, value.size())) {
    return rpc::Errc::kMsgTooLarge;
  }
  req.resize(encode_put_request(key, value, req.data()));
  return rpc_->enqueue_request(session_for(key), kPutReqType, req, resp, std::move(done));
}

rpc::Errc Client::del(std::string_view key, rpc::MsgBuffer& req, rpc::MsgBuffer& resp,
                      rpc::ContinuationFn done) {
  if (!valid_key(key)) return rpc::Errc::kInvalidArgument;
  if (!req.valid() || req.max_size() < encoded_key_request_bytes(key))
    return rpc::Errc::kMsgTooLarge;
  req.resize(encode_key_request(key, req.data()));
  return rpc_->enqueue_request(session_for(key), kDeleteReqType, req, resp, std::move(done));
}

rpc::Result<std::optional<std::string>> Client::get_sync(std::string_view key,
                                                         std::chrono::microseconds timeout) {
  if (!valid_key(key)) return rpc::Failure{fmt::format("invalid key '{}'", key)};
  rpc::OwnedBuffer req(*rpc_, encoded_key_request_bytes(key)),
      resp(*rpc_, kStatusBytes + kMaxValueBytes);
  if (!req.valid() || !resp.valid()) return rpc::Failure{"cannot allocate message buffers"};
  req.get().resize(encode_key_request(key, req.data()));
  const rpc::CallResult r = call_sync(key, kGetReqType, req, resp, timeout);
  if (!r.ok()) return rpc::Failure{fmt::format("GET '{}' failed: {}", key, describe_failure(r))};
  const std::optional<GetResult> got = parse_get_response(resp, r.resp_size);
  if (!got) return rpc::Failure{fmt::format("GET '{}': malformed response", key)};
  if (!got->found) return std::optional<std::string>();
  return std::optional<std::string>(
      std::string(reinterpret_cast<const char*>(got->value.data()), got->value.size()));
}

rpc::Result<void> Client::put_sync(std::string_view key, std::span<const uint8_t> value,
                                   std::chrono::microseconds timeout) {
  if (!valid_key(key) || value.size() > kMaxValueBytes) {
    return rpc::Failure{fmt::format("invalid key '{}' or value of {} bytes", key, value.size())};
  }
  rpc::OwnedBuffer req(*rpc_, encoded_put_request_bytes(key, value.size())),
      resp(*rpc_, kStatusBytes);
  if (!req.valid() || !resp.valid()) return rpc::Failure{"cannot allocate message buffers"};
  req.get().resize(encode_put_request(key, value, req.data()));
  const rpc::CallResult r = call_sync(key, kPutReqType, req, resp, timeout);
  if (!r.ok()) return rpc::Failure{fmt::format("PUT '{}' failed: {}", key, describe_failure(r))};
  if (parse_status_response(resp, r.resp_size) != Status::kStored) {
    return rpc::Failure{fmt::format("PUT '{}': malformed response", key)};
  }
  return {};
}

rpc::Result<bool> Client::del_sync(std::string_view key, std::chrono::microseconds timeout) {
  if (!valid_key(key)) return rpc::Failure{fmt::format("invalid key '{}'", key)};
  rpc::OwnedBuffer req(*rpc_, encoded_key_request_bytes(key)), resp(*rpc_, kStatusBytes);
  if (!req.valid() || !resp.valid()) return rpc::Failure{"cannot allocate message buffers"};
  req.get().resize(encode_key_request(key, req.data()));
  const rpc::CallResult r = call_sync(key, kDeleteReqType, req, resp, timeout);
  if (!r.ok()) return rpc::Failure{fmt::format("DELETE '{}' failed: {}", key, describe_failure(r))};
  const std::optional<Status> status = parse_status_response(resp, r.resp_size);
  if (status != Status::kDeleted && status != Status::kNotFound) {
    return rpc::Failure{fmt::format("DELETE '{}': malformed response", key)};
  }
  return *status == Status::kDeleted;
}

rpc::CallResult Client::call_sync(std::string_view key, rpc::ReqType type, rpc::MsgBuffer& req,
                                  rpc::MsgBuffer& resp, std::chrono::microseconds timeout) {
  return rpc::call_sync(*rpc_, session_for(key), type, req, resp, timeout);
}

}  // namespace kv
