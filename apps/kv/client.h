// The client side of the key-value service: a session to each of the
// server's partitions (one Rpc each), and get/put/delete that send a key to
// the partition that owns it. Asynchronous calls for load generators (the
// caller owns the buffers, as with Rpc::enqueue_request) and blocking ones
// for tools and tests. Belongs to the thread of its Rpc, like the Rpc.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "librpc/rpc_all.h"
#include "protocol.h"

namespace kv {

// A decoded GET response; value points into the response buffer.
struct GetResult {
  bool found = false;
  std::span<const uint8_t> value;
};
// nullopt when the response is not a GET response (a broken server).
std::optional<GetResult> parse_get_response(const rpc::MsgBuffer& resp, size_t resp_size);
// The status byte of a PUT or DELETE response; nullopt if malformed.
std::optional<Status> parse_status_response(const rpc::MsgBuffer& resp, size_t resp_size);

// Why a request failed, for people: the transport's Errc, or the server's
// KvError for Errc::kAppError.
std::string describe_failure(const rpc::Completion& c);
std::string describe_failure(const rpc::CallResult& r);

class Client {
 public:
  // Asks Rpc 0 of the server at server_uri how many partitions it has
  // (INFO), then connects a session to each partition's Rpc. A Failure
  // says which step failed and why.
  static rpc::Result<Client> connect(rpc::Rpc& rpc, const std::string& server_uri,
                                     std::chrono::milliseconds timeout);

  uint16_t partitions() const { return static_cast<uint16_t>(sessions_.size()); }
  rpc::SessionNum session_for(std::string_view key) const {
    return sessions_[partition_of(key, partitions())];
  }

  // Asynchronous calls: encode the request into `req` (which must hold
  // encoded_*_bytes(); kMsgTooLarge otherwise) and enqueue it, as
  // Rpc::enqueue_request does (same ownership of req and resp, same
  // exactly-once continuation when kOk is returned). resp must hold
  // kStatusBytes for PUT and DELETE and kStatusBytes + the value for GET.
  // A key that is empty or above kMaxKeyBytes, or a value above
  // kMaxValueBytes, returns kInvalidArgument and sends nothing.
  rpc::Errc get(std::string_view key, rpc::MsgBuffer& req, rpc::MsgBuffer& resp,
                rpc::ContinuationFn done);
  rpc::Errc put(std::string_view key, std::span<const uint8_t> value, rpc::MsgBuffer& req,
                rpc::MsgBuffer& resp, rpc::ContinuationFn done);
  rpc::Errc del(std::string_view key, rpc::MsgBuffer& req, rpc::MsgBuffer& resp,
                rpc::ContinuationFn done);

  // Blocking calls (run the Rpc's event loop; not from inside it). The
  // value, or nullopt when the key is absent.
  rpc::Result<std::optional<std::string>> get_sync(std::string_view key,
                                                   std::chrono::microseconds timeout);
  rpc::Result<void> put_sync(std::string_view key, std::span<const uint8_t> value,
                             std::chrono::microseconds timeout);
  // true when the key was there.
  rpc::Result<bool> del_sync(std::string_view key, std::chrono::microseconds timeout);

 private:
  Client(rpc::Rpc& rpc, std::vector<rpc::SessionNum> sessions)
      : rpc_(&rpc), sessions_(std::move(sessions)) {}
  rpc::CallResult call_sync(std::string_view key, rpc::ReqType type, rpc::MsgBuffer& req,
                            rpc::MsgBuffer& resp, std::chrono::microseconds timeout);

  rpc::Rpc* rpc_;
  std::vector<rpc::SessionNum> sessions_;  // index: partition
};

}  // namespace kv
