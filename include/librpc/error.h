// Error model: datapath outcomes are a one-byte Errc handed to
// continuations; control-plane calls return Result<T>; constructors throw
// rpc::Error.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <variant>

#include "librpc/export.h"

namespace rpc {

// Outcome of a request, reported to its continuation (or returned by
// enqueue_request when the request is refused before it is queued: a
// return value the compiler will not let you ignore).
enum class [[nodiscard]] Errc : uint8_t{
    kOk = 0,
    kInvalidSession,        // no such session on this Rpc
    kSessionConnectFailed,  // the session could not be connected
    kSessionDestroyed,      // destroy_session() was called with the request outstanding
    kSessionReset,          // the remote failed; the session was reset
    kMsgTooLarge,           // the request exceeds the maximum message size
    kRespBufferTooSmall,    // the response does not fit in the response buffer
    kNoHandler,             // the server has no handler for this request type
    kInvalidArgument,       // e.g. an unallocated MsgBuffer
    kHandlerFailed,         // the server's handler threw; no response was produced
    kTimedOut,   // past RequestOptions::timeout (the session lives on), or no progress for
                 // RpcConfig::request_timeout_ms (the session was reset)
    kCancelled,  // Rpc::cancel() was called for the request
    kAppError,   // the handler answered with an application error: Completion::app_error
    // The handler ran, but the server dropped its response before this
    // client had it (the response was not asked for again for
    // partial_request_timeout_ms while the server's receive budget was
    // full: RpcConfig::rx_budget_per_rpc_bytes). Not retried: the handler
    // ran once.
    kResponseDropped,
};

RPC_EXPORT std::string_view to_string(Errc errc);

// Exception thrown by constructors and fatal setup failures. It is a
// std::system_error so it carries errno where one applies.
class RPC_EXPORT Error : public std::system_error {
 public:
  explicit Error(const std::string& what, int errno_value = 0)
      : std::system_error(errno_value, std::generic_category(), what),
        what_(errno_value == 0 ? what : std::system_error::what()) {}
  // The context, plus the errno text when there is one (std::system_error
  // alone would append ": Success" for errno 0).
  const char* what() const noexcept override { return what_.c_str(); }

 private:
  std::string what_;
};

// The error half of a Result: a category-free code plus human context.
struct Failure {
  std::string message;
};

// A value or a Failure. Modelled on std::expected (C++23), which C++20 lacks.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : state_(std::move(value)) {}            // NOLINT(implicit)
  Result(Failure failure) : state_(std::move(failure)) {}  // NOLINT(implicit)

  bool has_value() const { return state_.index() == 0; }
  explicit operator bool() const { return has_value(); }
  T& value() & { return std::get<0>(state_); }
  const T& value() const& { return std::get<0>(state_); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  // REQUIRES: !has_value()
  const std::string& error() const { return std::get<1>(state_).message; }

 private:
  std::variant<T, Failure> state_;
};

// Success with nothing to return, or a Failure.
template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Failure failure) : failure_(std::move(failure)), ok_(false) {}  // NOLINT(implicit)

  bool has_value() const { return ok_; }
  explicit operator bool() const { return ok_; }
  // REQUIRES: !has_value()
  const std::string& error() const { return failure_.message; }

 private:
  Failure failure_;
  bool ok_ = true;
};

}  // namespace rpc
