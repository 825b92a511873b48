// The benchmark server side: Rpcs on threads of their own in this process,
// each pinned to a CPU when asked, busy-polling its event loop and running
// the bench handlers (common/handlers.h) in it until stopped.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <string_view>
#include <thread>
#include <vector>

#include "common/args.h"
#include "common/handlers.h"
#include "librpc/rpc_all.h"

namespace bench {

class ServerThreads {
 public:
  // Starts `count` threads; thread i creates Rpc first_id + i on `nexus`
  // (whose handlers are registered) and, when `cpus` is not empty, pins
  // itself to cpus[i] first. Returns once every Rpc exists. Throws the
  // first thread's error (after joining them all).
  ServerThreads(rpc::Nexus& nexus, const EndpointOptions& ep, std::size_t count,
                rpc::RpcId first_id, const std::vector<int>& cpus);
  // Stops and joins the threads; errors are dropped (call stop() for them).
  ~ServerThreads();
  ServerThreads(const ServerThreads&) = delete;
  ServerThreads& operator=(const ServerThreads&) = delete;

  // Stops and joins the threads, then rethrows the first thread's error.
  // Idempotent.
  void stop();

  std::size_t size() const { return workers_.size(); }
  // True when every thread was asked to pin and managed to.
  bool all_pinned() const;
  // True once a thread has died of an exception (stop() rethrows it).
  bool any_failed() const;
  // Requests handled so far by thread i. Any thread may call.
  std::uint64_t requests(std::size_t i) const;
  // Counters of thread i's Rpc when it stopped. REQUIRES: stop() returned.
  const rpc::RpcStats& final_stats(std::size_t i) const { return workers_[i]->final_stats; }

 private:
  enum State : int { kStarting, kRunning, kDone, kFailed };

  struct Worker {
    ServerCounters counters;  // first: it is cache-line aligned
    std::thread thread;
    std::atomic<int> state{kStarting};
    bool pinned = false;
    std::exception_ptr error;
    rpc::RpcStats final_stats;
  };

  void run(Worker& w, rpc::Nexus& nexus, const EndpointOptions& ep, rpc::RpcId id, int cpu);
  void join_all();

  std::atomic<bool> stop_{false};
  std::vector<std::unique_ptr<Worker>> workers_;
};

// Server mode's main loop: waits for SIGINT/SIGTERM (see
// install_stop_signals()) or a thread's failure while the threads serve,
// with `progress` printing each second in which requests arrived their rate
// per thread. Then stops the threads, rethrowing a thread's error. Returns
// the requests served.
std::uint64_t serve_until_stopped(std::string_view program, ServerThreads& servers, bool progress);

}  // namespace bench
