// The benchmark client side for throughput: client threads, each with an
// Rpc of its own (pinned when asked) that opens its sessions and runs a
// ClosedLoop on them until stopped; and the measurement of a time window
// over their counters.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/args.h"
#include "common/closed_loop.h"
#include "common/server_threads.h"
#include "librpc/rpc_all.h"

namespace bench {

struct ClientThreadsConfig {
  EndpointOptions ep;  // transport and MTU
  std::string server_uri;
  std::size_t threads = 1;
  rpc::RpcId first_id = 0;   // thread i is Rpc first_id + i
  std::size_t sessions = 1;  // per thread
  // Session k of thread i goes to server Rpc (i * sessions + k) %
  // server_threads: round-robin over the server's rpc_ids 0, 1, ...
  std::size_t server_threads = 1;
  ClosedLoop::Params load;
  std::vector<int> cpus;  // one per thread; empty: not pinned
};

class ClientThreads {
 public:
  // Starts the threads; returns once every one has connected its sessions
  // and filled its windows. Throws the first thread's error (after joining
  // them all).
  ClientThreads(rpc::Nexus& nexus, const ClientThreadsConfig& config);
  // Stops and joins; errors are dropped (call stop() for them).
  ~ClientThreads();
  ClientThreads(const ClientThreads&) = delete;
  ClientThreads& operator=(const ClientThreads&) = delete;

  // Stops the loops, drains what is outstanding, closes the sessions and
  // joins the threads; then rethrows the first thread's error. Idempotent.
  void stop();

  std::size_t size() const { return workers_.size(); }
  bool all_pinned() const;
  bool any_failed() const;
  // Counters of thread i. Any thread may call.
  std::uint64_t completed(std::size_t i) const;
  std::uint64_t errors(std::size_t i) const;

  // What thread i saw, once stop() has returned.
  struct Final {
    std::uint64_t retransmissions = 0;
    std::uint64_t spurious_retransmissions = 0;  // RpcStats: packets answered twice
    std::uint64_t cc_paced_pkts = 0;             // SessionStats, over its sessions
    std::uint64_t cc_min_rate_mbps = 0;          // the lowest session rate at the end
    std::uint64_t cc_timeout_cuts = 0;           // RpcStats: rate cuts for timeouts
    std::uint64_t cc_timeout_cuts_undone = 0;    // and those given back (spurious)
    std::size_t resets = 0;                      // sessions the server reset
    bool drained = true;                         // everything outstanding came back at the end
    std::string first_error;                     // of its ClosedLoop; empty when none
  };
  const Final& final_state(std::size_t i) const { return workers_[i]->final; }

 private:
  enum State : int { kStarting, kRunning, kDone, kFailed };

  struct Worker {
    LoopCounters counters;  // first: it is cache-line aligned
    std::thread thread;
    std::atomic<int> state{kStarting};
    bool pinned = false;
    std::exception_ptr error;
    Final final;
  };

  void run(Worker& w, std::size_t index, rpc::Nexus& nexus, const ClientThreadsConfig& config);
  void join_all();

  ClientThreadsConfig config_;
  std::atomic<bool> stop_{false};
  std::vector<std::unique_ptr<Worker>> workers_;
};

// Completions counted over one measured window.
struct Window {
  double seconds = 0;
  std::vector<std::uint64_t> client_completed;  // per client thread
  std::vector<std::uint64_t> server_requests;   // per server thread; empty without servers
  bool interrupted = false;                     // cut short by SIGINT/SIGTERM
};

// Lets the clients warm up for warmup_s, then counts completions for
// duration_s (less when a stop signal arrives). Every second of a run of at
// least kProgressMinRunS it prints progress_text(completions per second
// over that second). Returns nothing as soon as a client or server thread
// fails (their stop() tells why); throws RunError when nothing completes
// for several seconds. `servers` may be null (client mode).
std::optional<Window> measure_window(std::string_view program, const ClientThreads& clients,
                                     const ServerThreads* servers, double warmup_s,
                                     double duration_s,
                                     const std::function<std::string(double per_s)>& progress_text);

// measure_window(), then clients.stop(). When either fails, stops the
// servers too (if any) and throws, a server's error in preference: it
// explains the client's.
Window measure_then_stop(std::string_view program, ClientThreads& clients, ServerThreads* servers,
                         double warmup_s, double duration_s,
                         const std::function<std::string(double per_s)>& progress_text);

}  // namespace bench
