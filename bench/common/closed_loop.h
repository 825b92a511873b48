// A closed-loop client: keeps `window` requests outstanding on each of a
// client Rpc's sessions, each continuation re-enqueueing its request (same
// buffers) at once, as eRPC's small_rpc_tput and large_rpc_tput do. More
// than the engine's per-session slots wait in the session backlog.
//
// Threading: everything runs on the Rpc's thread; the LoopCounters it
// writes may be read by any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/connect.h"
#include "librpc/rpc_all.h"

namespace bench {

// What a ClosedLoop counts. Written by the Rpc's thread only, with a
// relaxed load and store (no read-modify-write: the hot path stays a plain
// store); any thread may read. Owned by the caller so that it outlives the
// loop (a reader need not know when the loop is gone), and on a cache line
// of its own so that client threads do not share one.
struct alignas(64) LoopCounters {
  // Requests that completed with Errc::kOk and the expected response size.
  std::atomic<std::uint64_t> completed{0};
  // Requests that failed, came back with the wrong size, or were refused
  // when re-enqueued (not counting those failed by finish()'s timeout).
  std::atomic<std::uint64_t> errors{0};
};

class ClosedLoop {
 public:
  struct Params {
    // kEchoType, kSizedRespType, kChecksumType (whose responses must
    // carry the request's checksum: others count as errors), kPoolReadType
    // or kPoolViewType.
    rpc::ReqType req_type = 0;
    std::size_t req_size = 0;
    // The response size asked for and expected; other sizes count as errors.
    std::size_t resp_size = 0;
    std::size_t window = 1;  // outstanding requests per session
  };

  // Allocates window request and response buffers per session and fills the
  // requests. Throws RunError when the Rpc cannot allocate them.
  ClosedLoop(rpc::Rpc& rpc, std::vector<ClientSession> sessions, const Params& params,
             LoopCounters& counters);
  // Finishes (briefly) if finish() was not called, then frees the buffers.
  ~ClosedLoop();
  ClosedLoop(const ClosedLoop&) = delete;
  ClosedLoop& operator=(const ClosedLoop&) = delete;

  // Enqueues every session's window. Throws RunError when a request is
  // refused.
  void start();
  // Stops re-enqueueing and runs the event loop until nothing is
  // outstanding. If that takes longer than `timeout`, destroys the sessions,
  // which fails what is left, and returns false.
  bool finish(std::chrono::steady_clock::duration timeout);

  std::size_t outstanding() const { return outstanding_; }
  // What the first error was; empty when none.
  const std::string& first_error() const { return first_error_; }

 private:
  struct Request {
    ClosedLoop* loop = nullptr;
    rpc::SessionNum session = rpc::kInvalidSessionNum;
    rpc::MsgBuffer req;
    rpc::MsgBuffer resp;
  };

  static void on_response(rpc::Rpc& rpc, const rpc::Completion& c);
  void record_error(std::string what);
  // Whether a kChecksumType response carries the checksum of our requests.
  bool checksum_ok(const Request& r) const;
  // Clears the checksum bytes of r's response buffer before it is reused,
  // so that a stale one from the previous response cannot pass.
  void clear_checksum(Request& r) const;
  void free_buffers();

  rpc::Rpc& rpc_;
  std::vector<ClientSession> sessions_;
  Params params_;
  LoopCounters& counters_;
  std::vector<Request> requests_;        // never resized: tags point into it
  std::uint64_t expected_checksum_ = 0;  // kChecksumType: of every request (same bytes)
  std::size_t outstanding_ = 0;
  bool stopping_ = false;
  bool finished_ = false;
  std::string first_error_;
};

}  // namespace bench
