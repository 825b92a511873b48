// Coroutines on an Rpc (librpc/coro.h): spawned tasks, and the engine
// side of coroutine handlers.
#include <exception>

#include "common/log.h"
#include "rpc/impl_access.h"
#include "rpc/rpc_impl.h"

namespace rpc {

void Rpc::spawn(Task<void> task) { impl_->spawn(task.release()); }

namespace detail {

void RpcImpl::spawn(std::coroutine_handle<TaskPromise<void>> task) {
  RPC_CHECK_OWNER("spawn");
  if (!task) return;
  TaskPromise<void>& p = task.promise();
  RPC_CHECK_USAGE(p.spawned_in == nullptr && p.continuation == nullptr && !task.done(),
                  "Rpc {}: spawn of a task that was already started", config_.rpc_id);
  p.spawned_on = &owner_;
  spawned_.add(&p);
  p.spawned_in = &spawned_;
  task.resume();  // until its first suspension; it may end (and free itself) here
}

namespace {

const char* what_of(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    thread_local std::string what;
    what = ex.what();
    return what.c_str();
  } catch (...) {
    return "an exception not derived from std::exception";
  }
}

}  // namespace

}  // namespace detail

void CoroutineSupport::report_task_exception(Rpc& rpc, std::exception_ptr e) noexcept {
  detail::impl_of(rpc).count_task_exception(detail::what_of(e));
}

CoroutineSupport::HandlerRun CoroutineSupport::handler_run(ReqHandle& handle) noexcept {
  detail::ServerSlot& slot = *detail::ReqHandleAccess::slot(handle);
  detail::Session& session = *slot.session;
  return HandlerRun{&handle.rpc(), session.local_num,
                    static_cast<uint32_t>(slot.req_num % detail::kSessionReqWindow), slot.req_num};
}

void CoroutineSupport::handler_ended(const HandlerRun& run, std::exception_ptr e) noexcept {
  detail::impl_of(*run.rpc).coroutine_handler_ended(run.session_num, run.slot_index, run.req_num,
                                                    e);
}

namespace detail {

void RpcImpl::count_task_exception(const char* what) {
  stats_.task_exceptions++;
  RPC_LOG_ERROR("Rpc {}: a spawned coroutine threw: {}", config_.rpc_id, what);
}

// A coroutine handler's task ended. Unanswered, its request fails with
// kHandlerFailed: a throw is counted as a handler exception; ending
// without an answer is misuse, said in the log.
void RpcImpl::coroutine_handler_ended(SessionNum sn, size_t slot_index, uint64_t req_num,
                                      std::exception_ptr e) {
  if (destroying_) [[unlikely]] {
    // ~Rpc resumed it (its nested call failed): its session is still
    // there, but its client is being reset, so nothing is answered (as
    // enqueue_response ignores an answer now).
    if (e) {
      handler_exceptions_.fetch_add(1, std::memory_order_relaxed);
      RPC_LOG_WARN("Rpc {}: a coroutine handler threw during ~Rpc: {}", config_.rpc_id, what_of(e));
    }
    return;
  }
  if (e) {
    handler_failed(sn, slot_index, req_num, what_of(e));
    return;
  }
  Session* s = sn < sessions_.size() ? sessions_[sn].get() : nullptr;
  if (s == nullptr || s->is_client() || !s->sslots.has(slot_index)) return;
  ServerSlot& slot = s->sslots[slot_index];
  if (slot.state != ServerSlotState::kInHandler || slot.req_num != req_num) return;  // answered
  RPC_LOG_ERROR(
      "Rpc {}: a coroutine handler (request type {}) finished without answering its "
      "request; it fails with kHandlerFailed",
      config_.rpc_id, slot.handle.req_type());
  stats_.handlers_unanswered++;
  MsgBuffer& pre_resp = ReqHandleAccess::pre_resp(slot.handle);
  pre_resp.resize(0);
  apply_response(slot.handle, pre_resp, RespStatus::kHandlerFailed);
}

}  // namespace detail
}  // namespace rpc
