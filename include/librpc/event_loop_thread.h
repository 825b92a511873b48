// EventLoopThread: an Rpc on a thread of its own, for applications whose
// threads cannot run an event loop (a GUI, a thread pool, a blocking
// server framework). The thread creates the Rpc, busy-polls its event loop
// (one core, as any Rpc) and runs the work other threads submit, between
// iterations, on the Rpc's thread, where every Rpc call is allowed.
//
//   rpc::EventLoopThread loop(nexus, rpc::RpcConfig{.rpc_id = 3});
//   loop.submit([](rpc::Rpc& rpc) { ... rpc.enqueue_request(...) ... });
//
// Work should not throw; if it does, the exception is logged and counted
// (work_exceptions()) and the loop carries on.
#pragma once

#include <cstdint>
#include <memory>

#include "librpc/callback.h"
#include "librpc/config.h"
#include "librpc/export.h"
#include "librpc/nexus.h"
#include "librpc/types.h"

namespace rpc {

class RPC_EXPORT EventLoopThread {
 public:
  using Work = Callback<void(Rpc& rpc)>;

  // Starts the thread and creates the Rpc on it; returns once it exists.
  // Throws rpc::Error (from the Rpc's constructor) if it cannot be created.
  // on_iteration, if given, runs on the loop's thread after every
  // event-loop iteration (a poller: e.g. to watch an application queue);
  // it must be quick; an exception from it is logged and counted like
  // submitted work's. REQUIRES: the Nexus outlives this object.
  EventLoopThread(Nexus& nexus, const RpcConfig& config, Work on_iteration = nullptr);
  // stop().
  ~EventLoopThread();
  EventLoopThread(const EventLoopThread&) = delete;
  EventLoopThread& operator=(const EventLoopThread&) = delete;

  // Any thread: queues `work` to run on the loop's thread, in submission
  // order per submitting thread, outside the event loop (it may call
  // call_sync, connect, create sessions...). Returns false, dropping it
  // unrun, once stop() has begun. Allocates (a queue slot, and the work's
  // capture if it is larger than Callback::kInlineBytes). An empty Work is
  // refused (false).
  bool submit(Work work);
  // Any thread but the loop's own (that would wait for itself: aborts):
  // submit(work) and wait until it has run. Returns false if stopped.
  bool run_and_wait(Work work);
  // Any thread but the loop's own: runs the work submitted so far, stops
  // the loop and destroys the Rpc on its thread (failing its outstanding
  // requests: ~Rpc), then joins. Idempotent; safe from several threads.
  void stop();

  RpcId rpc_id() const;
  // Submitted work that threw.
  uint64_t work_exceptions() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace rpc
