// The benchmark server side: Rpcs on threads of their own.
#include "common/server_threads.h"

#include <fmt/core.h>

#include "common/connect.h"
#include "common/cpu.h"
#include "common/program.h"
#include "common/progress.h"

namespace bench {

ServerThreads::ServerThreads(rpc::Nexus& nexus, const EndpointOptions& ep, std::size_t count,
                             rpc::RpcId first_id, const std::vector<int>& cpus) {
  for (std::size_t i = 0; i < count; ++i) workers_.push_back(std::make_unique<Worker>());
  for (std::size_t i = 0; i < count; ++i) {
    const auto id = static_cast<rpc::RpcId>(first_id + i);
    const int cpu = cpus.empty() ? -1 : cpus[i];
    // ep is copied: the thread may outlive the caller's options.
    workers_[i]->thread = std::thread(
        [this, w = workers_[i].get(), &nexus, ep, id, cpu] { run(*w, nexus, ep, id, cpu); });
  }
  for (const auto& w : workers_) {
    while (w->state.load(std::memory_order_acquire) == kStarting) std::this_thread::yield();
  }
  if (any_failed()) stop();  // throws the failure
}

ServerThreads::~ServerThreads() { join_all(); }

void ServerThreads::run(Worker& w, rpc::Nexus& nexus, const EndpointOptions& ep, rpc::RpcId id,
                        int cpu) {
  try {
    if (cpu >= 0) w.pinned = pin_current_thread(cpu, fmt::format("server rpc {}", id));
    rpc::RpcConfig config = make_rpc_config(ep, id);
    config.context = &w.counters;  // read by the handlers
    rpc::Rpc rpc(nexus, config);
    print_transport_choice(rpc);
    w.state.store(kRunning, std::memory_order_release);
    while (!stop_.load(std::memory_order_relaxed)) rpc.run_event_loop_once();
    w.final_stats = rpc.stats();
    w.state.store(kDone, std::memory_order_release);
  } catch (...) {
    w.error = std::current_exception();
    w.state.store(kFailed, std::memory_order_release);
  }
}

void ServerThreads::join_all() {
  stop_.store(true, std::memory_order_relaxed);
  for (const auto& w : workers_) {
    if (w->thread.joinable()) w->thread.join();
  }
}

void ServerThreads::stop() {
  join_all();
  for (const auto& w : workers_) {
    if (w->error) std::rethrow_exception(w->error);
  }
}

bool ServerThreads::all_pinned() const {
  for (const auto& w : workers_) {
    if (!w->pinned) return false;
  }
  return !workers_.empty();
}

bool ServerThreads::any_failed() const {
  for (const auto& w : workers_) {
    if (w->state.load(std::memory_order_acquire) == kFailed) return true;
  }
  return false;
}

std::uint64_t ServerThreads::requests(std::size_t i) const {
  return workers_[i]->counters.requests.load(std::memory_order_relaxed);
}

std::uint64_t serve_until_stopped(std::string_view program, ServerThreads& servers, bool progress) {
  const auto start = Clock::now();
  Progress ticker(program, start, progress);
  std::vector<std::uint64_t> last(servers.size(), 0);
  auto last_time = start;
  while (!stop_requested() && !servers.any_failed()) {
    // Sleeping, not polling: this thread must not take a core from a server.
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const auto now = Clock::now();
    if (!ticker.due(now)) continue;
    const double dt = std::chrono::duration<double>(now - last_time).count();
    std::string rates;
    std::uint64_t total = 0;
    for (std::size_t i = 0; i < servers.size(); ++i) {
      const std::uint64_t n = servers.requests(i);
      total += n - last[i];
      rates += fmt::format("{}{:.0f}", i == 0 ? "" : " ", static_cast<double>(n - last[i]) / dt);
      last[i] = n;
    }
    last_time = now;
    if (total != 0)
      ticker.print(now, fmt::format("{:.0f} requests/s (per thread: {})",
                                    static_cast<double>(total) / dt, rates));
  }
  servers.stop();
  std::uint64_t served = 0;
  for (std::size_t i = 0; i < servers.size(); ++i) served += servers.final_stats(i).handlers_run;
  return served;
}

}  // namespace bench
