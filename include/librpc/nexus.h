// Nexus: one per process. Owns the session-management UDP socket (and the
// thread that serves it), the request-handler table and the background
// handler threads. Rpc endpoints (one per thread) are created on a Nexus.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <type_traits>

#include "librpc/config.h"
#include "librpc/error.h"
#include "librpc/req_handle.h"
#include "librpc/stats.h"
#include "librpc/types.h"

namespace rpc {

// A request handler. It must eventually answer the handle exactly once,
// with Rpc::enqueue_response() or enqueue_error_response(), inside the
// handler or later (deferred). Foreground handlers run on the thread of the
// Rpc that received the request, inside its event loop (they must not run
// the loop themselves); background ones on a Nexus thread. A handler that
// throws before responding fails its request: the client's continuation
// sees Errc::kHandlerFailed, the server counts it in
// RpcStats::handler_exceptions and carries on. (An exception after the
// response is only counted.)
// Captures: the Nexus keeps the one handler object for its life and every
// Rpc of the Nexus calls it, each from its own thread (and background
// threads too), possibly at once: what it captures must outlive every Rpc
// and be safe to use from those threads (per-Rpc state belongs in
// RpcConfig::context, reached through ReqHandle::context()).
using ReqHandler = std::function<void(ReqHandle&)>;

template <typename T>
class Task;

namespace detail {
class NexusImpl;
struct ImplAccess;
template <typename T>
struct IsTask : std::false_type {};
template <typename U>
struct IsTask<Task<U>> : std::true_type {};
// A handler written as a coroutine (librpc/coro.h).
template <typename F>
concept ReturnsTask = std::is_same_v<std::invoke_result_t<F&, ReqHandle&>, Task<void>>;
// A coroutine that produces a value: nobody could take it (refused).
template <typename F>
concept ReturnsValueTask = IsTask<std::invoke_result_t<F&, ReqHandle&>>::value && !ReturnsTask<F>;
}  // namespace detail

class RPC_EXPORT Nexus {
 public:
  // Binds the session-management socket at config.uri and starts its
  // thread. Throws rpc::Error when the URI is malformed or cannot be bound.
  explicit Nexus(const NexusConfig& config);
  // REQUIRES: every Rpc created on this Nexus has been destroyed; checked:
  // otherwise it aborts with a message naming the live Rpcs (every build).
  ~Nexus();
  Nexus(const Nexus&) = delete;
  Nexus& operator=(const Nexus&) = delete;

  // Registers the handler for req_type. REQUIRES: no Rpc has been created
  // on this Nexus yet (the table is copied into each Rpc). Fails when a
  // handler is already registered for req_type, or when kBackground is asked
  // of a Nexus with no background threads.
  [[nodiscard]] Result<void> register_handler(ReqType req_type, ReqHandler handler,
                                              HandlerMode mode = HandlerMode::kForeground);
  // Registers a handler written as a coroutine: a callable taking
  // ReqHandle& and returning rpc::Task<void> (defined in librpc/coro.h,
  // which must be included). Each request spawns it on the Rpc that
  // received the request (Rpc::spawn): it runs on that Rpc's thread, may
  // co_await calls to other servers, and must enqueue_response() before
  // it finishes. Its request() stays valid until it responds (it is
  // copied out of the RX ring, unlike a plain foreground handler's). If it
  // throws before responding, the client sees Errc::kHandlerFailed. Only
  // HandlerMode::kForeground: a background thread cannot resume
  // coroutines of an Rpc. The callable lives as long as the Nexus, so its
  // captures do; the coroutine's frame is destroyed when it finishes, or
  // with the Rpc.
  template <typename F>
  requires detail::ReturnsTask<F>
  [[nodiscard]] Result<void> register_handler(ReqType req_type, F handler,
                                              HandlerMode mode = HandlerMode::kForeground);
  // A coroutine handler returns Task<void>: a Task<T> would be dropped
  // unstarted (converted to a plain handler), so it does not compile.
  template <typename F>
  requires detail::ReturnsValueTask<F> Result<void> register_handler(
      ReqType req_type, F handler, HandlerMode mode = HandlerMode::kForeground)
  = delete;

  // "host:port" this Nexus listens on (with the real port if 0 was asked).
  const std::string& uri() const;

  // Counters of the session-management thread, read now. Safe from any
  // thread; each counter is read on its own, so the snapshot is not atomic
  // as a whole.
  NexusStats stats() const;

 private:
  friend struct detail::ImplAccess;  // the library's own code, and its tests
  Result<void> register_coroutine_handler(ReqType req_type, ReqHandler spawner);
  std::unique_ptr<detail::NexusImpl> impl_;
};

}  // namespace rpc
