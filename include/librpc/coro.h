// C++20 coroutines on an Rpc: `co_await rpc.call(...)` for a request,
// Task<T> for coroutines that await, Rpc::spawn() to start one, and
// handlers written as coroutines (Nexus::register_handler with a callable
// returning Task<void>).
//
// Everything runs on the Rpc's thread. A coroutine awaiting a call is
// resumed by the request's continuation, inside the event loop: it may
// send requests, respond, spawn and cancel, but must not run the event
// loop (call_sync, run_event_loop abort there). Awaiting a call allocates
// nothing: the awaiter lives in the coroutine's frame and the continuation
// captures one pointer to it. A Task allocates its frame when created.
//
//   rpc::Task<void> client(rpc::Rpc& rpc, rpc::SessionNum sn) {
//     rpc::MsgBuffer req = rpc.alloc_msg_buffer(64), resp = rpc.alloc_msg_buffer(64);
//     rpc::CallResult r = co_await rpc.call(sn, kEcho, req, resp);
//     if (!r.ok()) ...  // r.errc says why
//   }
//   rpc.spawn(client(rpc, sn));
//   while (...) rpc.run_event_loop_once();
#pragma once

#include <coroutine>
#include <cstddef>
#include <exception>
#include <optional>
#include <type_traits>
#include <utility>

#include "librpc/error.h"
#include "librpc/nexus.h"
#include "librpc/req_handle.h"
#include "librpc/rpc.h"
#include "librpc/types.h"

namespace rpc {

// What coro.h's templates need from the compiled library (exported, so
// public; not for applications).
struct RPC_EXPORT CoroutineSupport {
  // An exception escaped a spawned task: logged and counted in
  // RpcStats::task_exceptions (the Rpc carries on, as for continuations).
  static void report_task_exception(Rpc& rpc, std::exception_ptr e) noexcept;
  // The request a handle holds now, named by number: once answered, the
  // handle (and its session) may be gone, or reused by the slot's next
  // request.
  struct HandlerRun {
    Rpc* rpc;
    SessionNum session_num;
    uint32_t slot_index;
    uint64_t req_num;
  };
  static HandlerRun handler_run(ReqHandle& handle) noexcept;
  // A coroutine handler threw (e != nullptr), or finished without
  // answering: if that request is still unanswered, the client is answered
  // with Errc::kHandlerFailed (logged), as for a plain handler that throws.
  static void handler_ended(const HandlerRun& run, std::exception_ptr e) noexcept;
};

namespace detail {

struct TaskPromiseBase;

// Tasks started by Rpc::spawn that have not finished: an intrusive list
// (no allocation) owned by the Rpc, which destroys what is left when it
// is destroyed itself.
struct SpawnedTasks {
  TaskPromiseBase* head = nullptr;
  size_t count = 0;
  void add(TaskPromiseBase* p) noexcept;
  void remove(TaskPromiseBase* p) noexcept;
  // Destroys every frame still listed (suspended forever otherwise).
  void destroy_all() noexcept;
};

struct TaskPromiseBase {
  std::coroutine_handle<> continuation;  // who awaits this task (none when spawned)
  std::exception_ptr exception;
  // Spawned tasks only.
  Rpc* spawned_on = nullptr;
  SpawnedTasks* spawned_in = nullptr;
  TaskPromiseBase* prev = nullptr;
  TaskPromiseBase* next = nullptr;
  std::coroutine_handle<> self;

  std::suspend_always initial_suspend() noexcept { return {}; }  // lazy: runs when awaited

  struct FinalAwaiter {
    bool await_ready() noexcept { return false; }
    template <typename Promise>
    std::coroutine_handle<> await_suspend(std::coroutine_handle<Promise> h) noexcept {
      TaskPromiseBase& p = h.promise();
      if (p.spawned_in != nullptr) {  // nobody awaits it: it ends itself
        p.spawned_in->remove(&p);
        if (p.exception) CoroutineSupport::report_task_exception(*p.spawned_on, p.exception);
        h.destroy();
        return std::noop_coroutine();
      }
      return p.continuation ? p.continuation : std::noop_coroutine();
    }
    void await_resume() noexcept {}
  };
  FinalAwaiter final_suspend() noexcept { return {}; }
  void unhandled_exception() noexcept { exception = std::current_exception(); }
};

inline void SpawnedTasks::add(TaskPromiseBase* p) noexcept {
  p->next = head;
  p->prev = nullptr;
  if (head != nullptr) head->prev = p;
  head = p;
  count++;
}
inline void SpawnedTasks::remove(TaskPromiseBase* p) noexcept {
  if (p->prev != nullptr) p->prev->next = p->next;
  if (p->next != nullptr) p->next->prev = p->prev;
  if (head == p) head = p->next;
  p->spawned_in = nullptr;
  count--;
}
inline void SpawnedTasks::destroy_all() noexcept {
  while (head != nullptr) {
    TaskPromiseBase* p = head;
    remove(p);
    p->self.destroy();
  }
}

template <typename T>
struct TaskPromise;

}  // namespace detail

// A coroutine that produces a T (or nothing). Lazy: its body starts when
// it is awaited (co_await task) or spawned (Rpc::spawn). Move-only; a Task
// that is neither destroys its frame unstarted. An exception thrown inside
// is rethrown by co_await; one escaping a spawned task is logged and
// counted (RpcStats::task_exceptions).
template <typename T = void>
class [[nodiscard]] Task {
 public:
  using promise_type = detail::TaskPromise<T>;
  using Handle = std::coroutine_handle<promise_type>;

  Task(Task&& other) noexcept : handle_(std::exchange(other.handle_, {})) {}
  Task& operator=(Task&& other) noexcept {
    if (this != &other) {
      if (handle_) handle_.destroy();
      handle_ = std::exchange(other.handle_, {});
    }
    return *this;
  }
  Task(const Task&) = delete;
  Task& operator=(const Task&) = delete;
  ~Task() {
    if (handle_) handle_.destroy();
  }

  auto operator co_await() && noexcept {
    struct Awaiter {
      Handle handle;
      bool await_ready() noexcept { return !handle || handle.done(); }
      std::coroutine_handle<> await_suspend(std::coroutine_handle<> awaiting) noexcept {
        handle.promise().continuation = awaiting;
        return handle;  // symmetric transfer: no stack growth in long chains
      }
      T await_resume() { return handle.promise().take_result(); }
    };
    return Awaiter{handle_};
  }

  // The frame, for Rpc::spawn; the Task no longer owns it.
  Handle release() noexcept { return std::exchange(handle_, {}); }

 private:
  friend struct detail::TaskPromise<T>;
  explicit Task(Handle h) noexcept : handle_(h) {}
  Handle handle_;
};

namespace detail {

template <typename T>
struct TaskPromise : TaskPromiseBase {
  std::optional<T> value;
  Task<T> get_return_object() noexcept {
    auto h = std::coroutine_handle<TaskPromise>::from_promise(*this);
    self = h;
    return Task<T>(h);
  }
  template <typename U>
  void return_value(U&& v) {
    value.emplace(std::forward<U>(v));
  }
  T take_result() {
    if (exception) std::rethrow_exception(exception);
    return std::move(*value);
  }
};

template <>
struct TaskPromise<void> : TaskPromiseBase {
  Task<void> get_return_object() noexcept {
    auto h = std::coroutine_handle<TaskPromise>::from_promise(*this);
    self = h;
    return Task<void>(h);
  }
  void return_void() noexcept {}
  void take_result() {
    if (exception) std::rethrow_exception(exception);
  }
};

}  // namespace detail

// co_await rpc.call(...): sends the request and resumes the awaiting
// coroutine with its outcome. A request the Rpc refuses resumes it at once
// with the refusal (the coroutine is not suspended).
class CallAwaiter {
 public:
  CallAwaiter(Rpc& rpc, SessionNum session_num, ReqType req_type, MsgBuffer& req, MsgBuffer& resp,
              const RequestOptions& options, RequestId* id_out)
      : rpc_(rpc),
        session_num_(session_num),
        req_type_(req_type),
        req_(req),
        resp_(resp),
        options_(options),
        id_out_(id_out) {}

  bool await_ready() const noexcept { return false; }
  bool await_suspend(std::coroutine_handle<> awaiting) noexcept {
    awaiting_ = awaiting;
    const Errc e = rpc_.enqueue_request(
        session_num_, req_type_, req_, resp_,
        [this](Rpc&, const Completion& c) {
          result_ = CallResult{c.errc, c.resp_size, c.app_error};
          awaiting_.resume();  // may end the coroutine and free *this: nothing after
        },
        options_, id_out_);
    if (e == Errc::kOk) return true;
    result_ = CallResult{e, 0};
    return false;  // not queued: go on at once
  }
  CallResult await_resume() const noexcept { return result_; }

 private:
  Rpc& rpc_;
  SessionNum session_num_;
  ReqType req_type_;
  MsgBuffer& req_;
  MsgBuffer& resp_;
  RequestOptions options_;
  RequestId* id_out_;
  std::coroutine_handle<> awaiting_;
  CallResult result_;
};

inline CallAwaiter Rpc::call(SessionNum session_num, ReqType req_type, MsgBuffer& req,
                             MsgBuffer& resp, const RequestOptions& options, RequestId* id_out) {
  return CallAwaiter(*this, session_num, req_type, req, resp, options, id_out);
}

namespace detail {

// Runs a coroutine handler; answers kHandlerFailed if it throws.
template <typename F>
Task<void> run_coroutine_handler(F& handler, ReqHandle& handle) {
  const CoroutineSupport::HandlerRun run = CoroutineSupport::handler_run(handle);
  std::exception_ptr failed;
  try {
    co_await handler(handle);
  } catch (...) {
    failed = std::current_exception();
  }
  // Also when it finished without answering (a coroutine handler answers
  // before it ends): the request would otherwise hold its slot for good.
  CoroutineSupport::handler_ended(run, failed);
}

}  // namespace detail

template <typename F>
requires detail::ReturnsTask<F> Result<void> Nexus::register_handler(ReqType req_type, F handler,
                                                                     HandlerMode mode) {
  if (mode != HandlerMode::kForeground) {
    return Failure{"register_handler: a coroutine handler runs in the foreground only"};
  }
  return register_coroutine_handler(req_type, [fn = std::move(handler)](ReqHandle& handle) mutable {
    handle.rpc().spawn(detail::run_coroutine_handler(fn, handle));
  });
}

}  // namespace rpc
