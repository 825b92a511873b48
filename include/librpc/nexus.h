// Nexus: one per process. Owns the session-management UDP socket (and the
// thread that serves it), the request-handler table and the background
// handler threads. Rpc endpoints (one per thread) are created on a Nexus.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "librpc/config.h"
#include "librpc/error.h"
#include "librpc/req_handle.h"
#include "librpc/stats.h"
#include "librpc/types.h"

namespace rpc {

namespace detail {
class NexusImpl;
}

// A request handler. It must eventually call Rpc::enqueue_response() for
// the handle, exactly once, inside the handler or later (deferred).
// Foreground handlers run on the Rpc's thread inside its event loop (they
// must not run the loop themselves); background ones on a Nexus thread.
// A handler that throws before responding fails its request: the client's
// continuation sees Errc::kHandlerFailed, the server counts it in
// RpcStats::handler_exceptions and carries on. (An exception after the
// response is only counted.) Captures must outlive every Rpc of the Nexus.
using ReqHandler = std::function<void(ReqHandle&)>;

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
  [[nodiscard]] Result<bool> register_handler(ReqType req_type, ReqHandler handler,
                                              HandlerMode mode = HandlerMode::kForeground);

  // "host:port" this Nexus listens on (with the real port if 0 was asked).
  const std::string& uri() const;

  // Counters of the session-management thread, read now. Safe from any
  // thread; each counter is read on its own, so the snapshot is not atomic
  // as a whole.
  NexusStats stats() const;

  detail::NexusImpl& impl() { return *impl_; }

 private:
  std::unique_ptr<detail::NexusImpl> impl_;
};

}  // namespace rpc
