// Blocking calls for simple clients, tools and tests: call_sync() runs the
// event loop until its request completes. (Rpc::connect() does the same
// for a session.) Not for code inside the event loop: a continuation,
// handler or coroutine that calls them aborts (the loop is not
// re-entrant); coroutines use `co_await rpc.call(...)` (librpc/coro.h).
#pragma once

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "librpc/error.h"
#include "librpc/msg_buffer.h"
#include "librpc/rpc.h"
#include "librpc/types.h"

namespace rpc {

// Sends req to the handler for req_type and runs rpc's event loop until
// the response is in resp, the request fails, or `timeout` passes
// (Errc::kTimedOut; RequestOptions::timeout, so up to half an RTO late).
// A timeout of 0 waits as long as the session lives (bounded by
// RpcConfig::request_timeout_ms, unless that is 0 too). Requests of other
// callers and handlers progress meanwhile (it is the same loop).
inline CallResult call_sync(Rpc& rpc, SessionNum session_num, ReqType req_type, MsgBuffer& req,
                            MsgBuffer& resp,
                            std::chrono::microseconds timeout = std::chrono::microseconds(0)) {
  // Before the request: one refused (a bad session) must not hide that the
  // caller could never have waited for it here.
  if (rpc.in_event_loop()) {
    std::fprintf(
        stderr,
        "librpc: API misuse: Rpc %u: call_sync called from inside the event loop (a continuation, "
        "handler, coroutine or session callback); it runs the loop, which is not "
        "re-entrant: use co_await rpc.call(...) or a continuation\n",
        static_cast<unsigned>(rpc.rpc_id()));
    std::fflush(stderr);
    std::abort();
  }
  bool done = false;
  CallResult result;
  const Errc queued = rpc.enqueue_request(
      session_num, req_type, req, resp,
      [&done, &result](Rpc&, const Completion& c) {
        result = CallResult{c.errc, c.resp_size, c.app_error};
        done = true;
      },
      RequestOptions{.timeout = timeout});
  if (queued != Errc::kOk) return CallResult{queued, 0};
  while (!done) rpc.run_event_loop_once();
  return result;
}

}  // namespace rpc
