// Rpc: one endpoint per thread. Client and server at once: it opens
// sessions to remote Rpcs, sends requests and runs handlers for requests it
// receives, all from its event loop.
//
// Threading: an Rpc belongs to the thread that created it. Every method
// must be called from that thread, except enqueue_response() for handles
// given to background handlers (from any thread), and alloc/free_msg_buffer()
// and app_msg_buffer(), which any thread may call when the Nexus has
// background threads (NexusConfig::num_bg_threads > 0, the default: they
// then take a lock). Builds with assertions
// (NDEBUG not defined: meson's default debugoptimized and debug builds,
// and every CI build) check the calling thread at the public entry points,
// the getters of state the loop changes (is_connected, stats, ...)
// included, and abort with a message on a wrong one; release builds do not
// check. What never changes after construction (rpc_id, max_msg_size,
// max_data_per_pkt, transport_name, transport_provider) may be read from
// any thread. Datapath methods are noexcept and do not allocate in the
// common case.
//
// Misuse fails loudly, in every build: running the event loop from inside
// itself (a continuation, handler or session callback), a second
// enqueue_response() for one request, or destroying the Rpc from inside its
// own event loop aborts the process with a message saying what was wrong.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "librpc/config.h"
#include "librpc/error.h"
#include "librpc/msg_buffer.h"
#include "librpc/nexus.h"
#include "librpc/req_handle.h"
#include "librpc/stats.h"
#include "librpc/types.h"

namespace rpc {

namespace detail {
class RpcImpl;
struct ImplAccess;
}  // namespace detail

class Rpc;
class CallAwaiter;

// Options of Rpc::register_memory.
struct AppMemoryOptions {
  // Called, on the Rpc's thread, each time the engine lets go of a view of
  // this memory it held (see Rpc::app_memory_in_flight): with the view's
  // data and max_size(). From then on the engine neither reads nor writes
  // those bytes, and no peer can read them (samehost excepted: a peer's
  // kernel read already under way when a request failed may still finish,
  // as for any buffer there; docs/transports.md, "samehost"): a server may
  // overwrite a value it served. Runs inside the engine (an event-loop iteration, or a call
  // such as destroy_session or ~Rpc): it must not call this Rpc, and must
  // not throw.
  std::function<void(const void* data, size_t size)> on_release;
};
template <typename T>
class Task;

class RPC_EXPORT Rpc {
 public:
  // Creates the endpoint and its transport, and registers it with the
  // Nexus under config.rpc_id. Throws rpc::Error when the rpc_id is taken
  // or out of range, or the transport cannot be created.
  Rpc(Nexus& nexus, const RpcConfig& config);
  // Fails every outstanding request with kSessionDestroyed (each
  // continuation runs exactly once, here), tells connected servers (and the
  // clients of its server sessions, whose sessions are reset with
  // SmErr::kRemoteRpcGone), and unregisters from the Nexus. Responses
  // deferred by handlers of this Rpc must not be sent after it is gone.
  // REQUIRES: not called from inside this Rpc's event loop (aborts).
  ~Rpc();
  Rpc(const Rpc&) = delete;
  Rpc& operator=(const Rpc&) = delete;

  // --- Sessions (control path) ---

  // Starts connecting a client session to Rpc remote_rpc_id at the Nexus
  // listening on remote_uri ("host:port"). Returns the session number at
  // once; the session callback later reports kConnected or kConnectFailed.
  // Requests may be enqueued before the session is connected: they wait.
  [[nodiscard]] Result<SessionNum> create_session(const std::string& remote_uri,
                                                  RpcId remote_rpc_id);
  // create_session(), then runs the event loop until the session is
  // connected (returns its number), its connect fails (a Failure saying
  // why: the SmErr), or `timeout` passes (the session is destroyed; a
  // Failure). For simple clients and tests; not from inside the event loop
  // (a continuation, handler or coroutine: aborts, like run_event_loop).
  [[nodiscard]] Result<SessionNum> connect(const std::string& remote_uri, RpcId remote_rpc_id,
                                           std::chrono::milliseconds timeout);
  // Fails the session's outstanding requests with kSessionDestroyed and
  // disconnects it; the callback reports kDisconnected. Fails for an
  // unknown session.
  [[nodiscard]] Result<void> destroy_session(SessionNum session_num);
  bool is_connected(SessionNum session_num) const;
  // Counters of one session (client or server end); nullptr if unknown.
  const SessionStats* session_stats(SessionNum session_num) const;
  size_t num_active_sessions() const;

  // --- Buffers ---

  // A registered buffer of max_size bytes (size() == max_size()). Returns an
  // invalid buffer (valid() == false) when max_size exceeds
  // max_msg_size(), when the buffer would take the Rpc past
  // RpcConfig::max_msg_buffer_bytes (counted, and logged once), or when
  // memory is exhausted.
  MsgBuffer alloc_msg_buffer(size_t max_size) noexcept;
  // REQUIRES: new_size <= buf.max_size(); returns false otherwise.
  bool resize_msg_buffer(MsgBuffer& buf, size_t new_size) noexcept { return buf.resize(new_size); }
  // Frees buf and invalidates the handle.
  void free_msg_buffer(MsgBuffer& buf) noexcept;

  // --- Application memory (docs/api.md, "Application memory") ---

  // Registers [addr, addr + len) of the application's own memory (a pool it
  // keeps) with this Rpc's transport, so that views of it
  // (app_msg_buffer) travel as requests and responses without a copy by
  // the engine. Nothing of it becomes remotely accessible: a peer may read
  // a view's bytes only while a large message sent from it is being
  // transferred (docs/reliability.md, "Bulk security model"). The memory
  // must stay mapped until deregister_memory or ~Rpc (which deregisters
  // what is left). Fails when addr is null, len is 0 or the transport
  // refuses (verbs, fabric: the NIC's registration). Rpc thread only.
  [[nodiscard]] Result<AppMemory> register_memory(void* addr, size_t len,
                                                  AppMemoryOptions options = {});
  // Ends the registration: every handle and view of it is stale from now
  // on (using a view in a request or response aborts; free_msg_buffer of
  // one still frees its headers). REQUIRES: app_memory_in_flight(mem) == 0:
  // deregistering memory the engine still uses (a request or response
  // buffer of an outstanding request, a response the server keeps, an
  // exposure to a peer) aborts with a message. Fails (a Failure) for a
  // handle that is not a live registration of this Rpc. Rpc thread only.
  [[nodiscard]] Result<void> deregister_memory(const AppMemory& mem);
  // A MsgBuffer whose data is [data, data + size) of the registered memory
  // `mem` (size() == max_size() == size): the engine sends a request or
  // response straight from it, and receives a response straight into it
  // (large messages on transports with a bulk path land there directly).
  // Its packet headers live in a small block the Rpc allocates; free the
  // view with free_msg_buffer (which frees that block, never the
  // application's memory) or hand it to enqueue_response (the Rpc frees
  // it). Invalid (valid() == false, an error logged) when size exceeds
  // max_msg_size() or the header block cannot be allocated. Aborts when
  // the range is not inside `mem` or `mem` is not a live registration of
  // this Rpc. Callable from the Rpc's thread and from background handlers.
  // A view is not a server's request buffer: requests arrive in buffers
  // of the engine.
  MsgBuffer app_msg_buffer(const AppMemory& mem, void* data, size_t size) noexcept;
  // Views of `mem` the engine holds now: each request or response buffer
  // passed to enqueue_request, from that call until its continuation runs,
  // and each response passed to enqueue_response, until the server drops
  // it, which is when the client's next request in that slot arrives or
  // the session ends (the server keeps a response for retransmission
  // until then). 0 for a stale handle. Rpc thread only.
  size_t app_memory_in_flight(const AppMemory& mem) const;

  // --- Datapath ---

  // Sends req (req.size() bytes) to the handler for req_type on the
  // session's server. The Rpc keeps req and resp by address, and owns
  // their memory, until the continuation runs: the MsgBuffer objects must
  // stay where they are (not moved, not freed) until then. The response is
  // written into resp (resized to the response size). Returns kOk when
  // queued (the continuation will run exactly once), or an error and does
  // nothing (the continuation will not run, and is destroyed). The first
  // request (or response) enqueued from outside the event loop since the
  // loop last ran is handed to the transport before the call returns;
  // later ones, and those from inside the loop (continuations, handlers),
  // leave in one batch at the end of the loop's iteration. A session has
  // up to 32 requests in flight (eRPC: 8); later ones wait in its backlog,
  // in order, and go when a request completes.
  // Takes a continuation as a function pointer and tag (eRPC's form)...
  Errc enqueue_request(SessionNum session_num, ReqType req_type, MsgBuffer& req, MsgBuffer& resp,
                       Continuation cont, void* tag) noexcept;
  // ... or as any callable (Completion::tag is then nullptr), with
  // per-request options. *id_out (if given) names the request for
  // cancel().
  Errc enqueue_request(SessionNum session_num, ReqType req_type, MsgBuffer& req, MsgBuffer& resp,
                       ContinuationFn cont, const RequestOptions& options = {},
                       RequestId* id_out = nullptr) noexcept;
  // Ends a request that has not completed: its continuation runs with
  // Errc::kCancelled, inside this call, except where a transfer may still
  // touch its buffers (they go back only when none does): a one-sided read
  // still writing its response buffer holds the continuation back until
  // the read is done; a request sent by one-sided read (a large request on
  // verbs or fabric) whose control packet went out ends when the server
  // answers it, since the server may be reading it and withdrawing memory
  // under an RDMA read breaks the connection. Returns false, doing
  // nothing, when no outstanding request has this id (it completed or is
  // ending already, or never existed).
  //
  // The session stays up. A server that already has the request still
  // runs its handler (at most once, as always) and its answer is dropped.
  // Until it answers, the session's new requests go to its other slots; one
  // takes that slot, and waits for the handler's answer, only when no other
  // slot is free.
  bool cancel(RequestId id) noexcept;
  // For coroutines (librpc/coro.h): `co_await rpc.call(...)` enqueues the
  // request as above and resumes the coroutine, on this Rpc's thread from
  // inside the event loop, with a CallResult once it completes. req and
  // resp must stay put until then (they usually live in the coroutine).
  CallAwaiter call(SessionNum session_num, ReqType req_type, MsgBuffer& req, MsgBuffer& resp,
                   const RequestOptions& options = {}, RequestId* id_out = nullptr);
  // Starts a coroutine now (it runs until its first suspension, here) and
  // keeps it until it finishes; ~Rpc destroys the frames of those still
  // suspended, after failing every outstanding request (which resumes
  // the ones awaiting calls). Calls from this Rpc's thread only. The
  // coroutine awaits calls of this Rpc only: its frame dies with this Rpc,
  // so a call pending on another Rpc would resume a destroyed frame.
  void spawn(Task<void> task);

  // Sends the response for a request. resp is either the handle's
  // pre_resp_buffer() or a buffer from alloc_msg_buffer(), which the Rpc
  // then owns and frees. Callable from the handler, later (deferred), from
  // a continuation (nested RPC), or from a background thread for handles
  // given to background handlers. Exactly once per request: a second call
  // for the same request (before the client's next request on that slot
  // reuses the handle) aborts with a message instead of corrupting state.
  // Sends at once or in the loop's batch by the rule of enqueue_request.
  void enqueue_response(ReqHandle& handle, MsgBuffer& resp) noexcept;
  // Answers the request with an application error instead of a response:
  // the client's continuation sees Errc::kAppError with
  // Completion::app_error == app_error (distinct from the transport's
  // errors; what the code means is the application's). Counts as the one
  // response of the request (same rules and threads as enqueue_response;
  // the handle's pre_resp_buffer() carries the code).
  void enqueue_error_response(ReqHandle& handle, uint32_t app_error) noexcept;

  // Runs the event loop for about `duration`. Not re-entrant: called from
  // a continuation, handler or session callback it aborts with a message.
  void run_event_loop(std::chrono::microseconds duration) noexcept;
  // One iteration: receive, handle, send, check timeouts.
  void run_event_loop_once() noexcept;
  // Whether the caller runs inside this Rpc's event loop or one of its
  // callbacks (a continuation, handler, coroutine or session callback, also
  // one that cancel(), destroy_session() or ~Rpc runs), where nothing may
  // run the loop: run_event_loop, call_sync() and connect() abort there,
  // before anything else.
  bool in_event_loop() const noexcept;

  // --- Introspection ---
  RpcId rpc_id() const;
  const RpcStats& stats() const;
  // Largest message this Rpc can send or receive.
  size_t max_msg_size() const;
  // Data bytes in one packet on this transport.
  size_t max_data_per_pkt() const;
  const std::string& transport_name() const;
  // What the transport chose where it had a choice, for people (logs,
  // benchmark output): fabric: the libfabric provider; verbs: the device,
  // port and GID index, and why that GID. Empty on udp and fake.
  std::string transport_provider() const;

 private:
  friend struct detail::ImplAccess;  // the library's own code, and its tests
  std::unique_ptr<detail::RpcImpl> impl_;
};

}  // namespace rpc
