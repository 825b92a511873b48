// EventLoopThread: an Rpc on its own thread, fed work through a mailbox.
#include "librpc/event_loop_thread.h"

#include <atomic>
#include <exception>
#include <future>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "common/log.h"
#include "common/mailbox.h"
#include "librpc/rpc.h"

namespace rpc {

struct EventLoopThread::State {
  RpcId rpc_id = kInvalidRpcId;
  detail::Mailbox<Work> mailbox;
  std::vector<Work> taken;  // the loop thread's batch (reused)
  // Submissions and the end of accepting them are ordered by this lock, so
  // that everything accepted runs before the Rpc goes away.
  std::mutex accepting_mutex;
  bool accepting = true;
  std::atomic<bool> stop{false};
  std::mutex stop_mutex;
  std::atomic<uint64_t> work_exceptions{0};
  Work on_iteration;
  std::thread::id loop_thread_id;
  std::thread thread;

  // Runs work (submitted, or on_iteration): an exception is logged and
  // counted, and the loop carries on.
  void run_guarded(Work& work, Rpc& rpc, const char* what) {
    try {
      work(rpc);
    } catch (const std::exception& e) {
      work_exceptions.fetch_add(1, std::memory_order_relaxed);
      RPC_LOG_ERROR("EventLoopThread (Rpc {}): {} threw: {}", rpc_id, what, e.what());
    } catch (...) {
      work_exceptions.fetch_add(1, std::memory_order_relaxed);
      RPC_LOG_ERROR("EventLoopThread (Rpc {}): {} threw", rpc_id, what);
    }
  }

  void run_work(Rpc& rpc) {
    mailbox.take_all(taken);
    for (Work& work : taken) run_guarded(work, rpc, "submitted work");
    taken.clear();  // destroys the work (and its captures) on this thread
  }

  void loop(Nexus& nexus, const RpcConfig& config, std::promise<void>& started) {
    std::optional<Rpc> rpc;
    try {
      rpc.emplace(nexus, config);
    } catch (...) {
      started.set_exception(std::current_exception());
      return;
    }
    started.set_value();
    while (!stop.load(std::memory_order_acquire)) {
      if (mailbox.pending()) run_work(*rpc);
      rpc->run_event_loop_once();
      if (on_iteration) run_guarded(on_iteration, *rpc, "on_iteration");
    }
    {
      std::lock_guard lock(accepting_mutex);
      accepting = false;
    }
    run_work(*rpc);
    on_iteration = nullptr;  // its captures die on this thread, before the Rpc
  }
};

EventLoopThread::EventLoopThread(Nexus& nexus, const RpcConfig& config, Work on_iteration)
    : state_(std::make_unique<State>()) {
  state_->rpc_id = config.rpc_id;
  state_->on_iteration = std::move(on_iteration);
  std::promise<void> started;
  std::future<void> ready = started.get_future();
  State* s = state_.get();
  s->thread = std::thread([s, &nexus, &config, &started] { s->loop(nexus, config, started); });
  s->loop_thread_id = s->thread.get_id();
  try {
    ready.get();  // the Rpc exists, or its constructor threw
  } catch (...) {
    s->thread.join();
    throw;
  }
}

EventLoopThread::~EventLoopThread() { stop(); }

bool EventLoopThread::submit(Work work) {
  if (!work) return false;  // nothing to run
  std::lock_guard lock(state_->accepting_mutex);
  if (!state_->accepting) return false;
  state_->mailbox.post(std::move(work));
  return true;
}

bool EventLoopThread::run_and_wait(Work work) {
  if (!work) return false;
  RPC_CHECK_USAGE(std::this_thread::get_id() != state_->loop_thread_id,
                  "EventLoopThread (Rpc {}): run_and_wait from its own thread would wait forever",
                  state_->rpc_id);
  std::promise<void> done;
  std::future<void> ran = done.get_future();
  // The caller waits below, so the work can be referred to, not moved.
  const bool queued = submit([&work, &done](Rpc& rpc) {
    try {
      work(rpc);
    } catch (...) {
      done.set_value();
      throw;  // counted by run_work
    }
    done.set_value();
  });
  if (!queued) return false;
  ran.wait();
  return true;
}

void EventLoopThread::stop() {
  RPC_CHECK_USAGE(std::this_thread::get_id() != state_->loop_thread_id,
                  "EventLoopThread (Rpc {}): stopped from its own thread", state_->rpc_id);
  std::lock_guard lock(state_->stop_mutex);  // two threads stopping: one joins
  if (!state_->thread.joinable()) return;
  state_->stop.store(true, std::memory_order_release);
  state_->thread.join();
}

RpcId EventLoopThread::rpc_id() const { return state_->rpc_id; }

uint64_t EventLoopThread::work_exceptions() const {
  return state_->work_exceptions.load(std::memory_order_relaxed);
}

}  // namespace rpc
