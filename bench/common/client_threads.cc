// The benchmark client side for throughput.
#include "common/client_threads.h"

#include <fmt/core.h>

#include <algorithm>
#include <chrono>

#include "common/connect.h"
#include "common/cpu.h"
#include "common/program.h"
#include "common/progress.h"

namespace bench {

namespace {

// How long the windows may take to come back once the loops stop: a few
// of the largest messages over a slow path.
constexpr auto kDrainTimeout = std::chrono::seconds(5);
// No completion at all for this long means the server has gone.
constexpr auto kStallTimeout = std::chrono::seconds(5);
// The coordinator wakes this often to notice failures and signals. It
// sleeps in between: it must not take a core from a busy-polling thread.
constexpr auto kPollPeriod = std::chrono::milliseconds(50);

}  // namespace

ClientThreads::ClientThreads(rpc::Nexus& nexus, const ClientThreadsConfig& config)
    : config_(config) {
  for (std::size_t i = 0; i < config_.threads; ++i) {
    workers_.push_back(std::make_unique<Worker>());
  }
  for (std::size_t i = 0; i < config_.threads; ++i) {
    workers_[i]->thread =
        std::thread([this, w = workers_[i].get(), i, &nexus] { run(*w, i, nexus, config_); });
  }
  for (const auto& w : workers_) {
    while (w->state.load(std::memory_order_acquire) == kStarting) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  if (any_failed()) stop();  // throws the failure
}

ClientThreads::~ClientThreads() { join_all(); }

void ClientThreads::run(Worker& w, std::size_t index, rpc::Nexus& nexus,
                        const ClientThreadsConfig& config) {
  try {
    const auto id = static_cast<rpc::RpcId>(config.first_id + index);
    if (!config.cpus.empty()) {
      w.pinned = pin_current_thread(config.cpus[index], fmt::format("client rpc {}", id));
    }
    ConnectWatch watch;
    rpc::Rpc rpc(nexus, make_rpc_config(config.ep, id, &watch));
    print_transport_choice(rpc);
    std::vector<ClientSession> sessions;
    for (std::size_t k = 0; k < config.sessions; ++k) {
      const std::size_t server = (index * config.sessions + k) % config.server_threads;
      sessions.push_back(start_session(rpc, config.server_uri, static_cast<rpc::RpcId>(server)));
    }
    wait_connected(rpc, sessions, watch, config.server_uri);
    {
      ClosedLoop loop(rpc, sessions, config.load, w.counters);
      loop.start();
      w.state.store(kRunning, std::memory_order_release);
      while (!stop_.load(std::memory_order_relaxed)) rpc.run_event_loop_once();
      w.final.drained = loop.finish(kDrainTimeout);
      w.final.first_error = loop.first_error();
    }
    w.final.retransmissions = rpc.stats().retransmissions;
    w.final.spurious_retransmissions = rpc.stats().spurious_retransmissions;
    w.final.cc_timeout_cuts = rpc.stats().cc_timeout_cuts;
    w.final.cc_timeout_cuts_undone = rpc.stats().cc_timeout_cuts_undone;
    w.final.resets = watch.resets;
    for (const ClientSession& cs : sessions) {
      if (const rpc::SessionStats* st = rpc.session_stats(cs.num)) {
        w.final.cc_paced_pkts += st->cc_paced_pkts;
        if (w.final.cc_min_rate_mbps == 0 || st->cc_rate_mbps < w.final.cc_min_rate_mbps) {
          w.final.cc_min_rate_mbps = st->cc_rate_mbps;
        }
      }
    }
    close_sessions(rpc, sessions);
    w.state.store(kDone, std::memory_order_release);
  } catch (...) {
    w.error = std::current_exception();
    w.state.store(kFailed, std::memory_order_release);
  }
}

void ClientThreads::join_all() {
  stop_.store(true, std::memory_order_relaxed);
  for (const auto& w : workers_) {
    if (w->thread.joinable()) w->thread.join();
  }
}

void ClientThreads::stop() {
  join_all();
  for (const auto& w : workers_) {
    if (w->error) std::rethrow_exception(w->error);
  }
}

bool ClientThreads::all_pinned() const {
  return !workers_.empty() &&
         std::all_of(workers_.begin(), workers_.end(), [](const auto& w) { return w->pinned; });
}

bool ClientThreads::any_failed() const {
  return std::any_of(workers_.begin(), workers_.end(), [](const auto& w) {
    return w->state.load(std::memory_order_acquire) == kFailed;
  });
}

std::uint64_t ClientThreads::completed(std::size_t i) const {
  return workers_[i]->counters.completed.load(std::memory_order_relaxed);
}

std::uint64_t ClientThreads::errors(std::size_t i) const {
  return workers_[i]->counters.errors.load(std::memory_order_relaxed);
}

namespace {

std::uint64_t total_completed(const ClientThreads& clients) {
  std::uint64_t n = 0;
  for (std::size_t i = 0; i < clients.size(); ++i) n += clients.completed(i);
  return n;
}

// Sleeps until `until` or the next poll, whichever is first. False when a
// client or server thread has failed: the caller stops and reports it.
bool nap(const ClientThreads& clients, const ServerThreads* servers, Clock::time_point until) {
  std::this_thread::sleep_until(std::min(until, Clock::now() + kPollPeriod));
  return !clients.any_failed() && (servers == nullptr || !servers->any_failed());
}

}  // namespace

std::optional<Window> measure_window(
    std::string_view program, const ClientThreads& clients, const ServerThreads* servers,
    double warmup_s, double duration_s,
    const std::function<std::string(double per_s)>& progress_text) {
  const auto to_clock = [](double s) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  };
  const auto warmup_end = Clock::now() + to_clock(warmup_s);
  while (Clock::now() < warmup_end && !stop_requested()) {
    if (!nap(clients, servers, warmup_end)) return std::nullopt;
  }

  Window w;
  const auto start = Clock::now();
  for (std::size_t i = 0; i < clients.size(); ++i) {
    w.client_completed.push_back(clients.completed(i));
  }
  for (std::size_t i = 0; servers != nullptr && i < servers->size(); ++i) {
    w.server_requests.push_back(servers->requests(i));
  }
  const auto end = start + to_clock(duration_s);
  Progress progress(program, start, duration_s >= kProgressMinRunS);
  std::uint64_t last_total = total_completed(clients);  // at the last progress line
  std::uint64_t seen_total = last_total;                // at the last poll
  auto last_tick = start;
  auto last_change = start;
  auto now = start;
  while (now < end && !stop_requested()) {
    if (!nap(clients, servers, std::min(end, progress.next()))) return std::nullopt;
    now = Clock::now();
    const std::uint64_t total = total_completed(clients);
    if (total != seen_total) last_change = now;
    seen_total = total;
    if (now - last_change > kStallTimeout) {
      throw RunError(fmt::format("no request completed for {} s; is the server running?",
                                 kStallTimeout.count()));
    }
    if (progress.due(now)) {
      const double dt = std::chrono::duration<double>(now - last_tick).count();
      progress.print(now, progress_text(static_cast<double>(total - last_total) / dt));
      last_tick = now;
      last_total = total;
    }
  }
  now = Clock::now();
  w.interrupted = now < end;
  w.seconds = std::chrono::duration<double>(now - start).count();
  for (std::size_t i = 0; i < clients.size(); ++i) {
    w.client_completed[i] = clients.completed(i) - w.client_completed[i];
  }
  for (std::size_t i = 0; i < w.server_requests.size(); ++i) {
    w.server_requests[i] = servers->requests(i) - w.server_requests[i];
  }
  return w;
}

Window measure_then_stop(std::string_view program, ClientThreads& clients, ServerThreads* servers,
                         double warmup_s, double duration_s,
                         const std::function<std::string(double per_s)>& progress_text) {
  std::optional<Window> w;
  std::exception_ptr client_error;
  try {
    w = measure_window(program, clients, servers, warmup_s, duration_s, progress_text);
    clients.stop();
  } catch (...) {
    client_error = std::current_exception();
  }
  if (client_error || !w) {
    if (servers != nullptr) servers->stop();
    if (client_error) std::rethrow_exception(client_error);
    throw RunError("a thread failed without an error");  // stop() would have thrown
  }
  return *w;
}

}  // namespace bench
