// CPU pinning for the benchmark threads.
#include "common/cpu.h"

#include <fmt/core.h>
#include <pthread.h>
#include <sched.h>

#include <cstdio>
#include <cstring>

namespace bench {

std::vector<int> allowed_cpus() {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &allowed)) cpus.push_back(cpu);
  }
  return cpus;
}

bool pin_current_thread(int cpu, std::string_view who) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (const int rc = pthread_setaffinity_np(pthread_self(), sizeof set, &set); rc != 0) {
    fmt::print(stderr, "warning: cannot pin {} to CPU {}: {}\n", who, cpu, std::strerror(rc));
    return false;
  }
  return true;
}

CpuPlan plan_cpus(std::size_t clients, std::size_t servers) {
  CpuPlan plan;
  const std::vector<int> cpus = allowed_cpus();
  if (cpus.size() < 2) {
    plan.why_not_pinned = fmt::format("only {} CPU available", cpus.size());
    return plan;
  }
  plan.shared = clients + servers > cpus.size();
  for (std::size_t k = 0; k < clients + servers; ++k) {
    (k < clients ? plan.client_cpus : plan.server_cpus).push_back(cpus[k % cpus.size()]);
  }
  return plan;
}

std::string describe_cpus(const std::vector<int>& cpus) {
  std::string list;
  for (const int cpu : cpus) list += fmt::format("{}{}", list.empty() ? "" : ",", cpu);
  return fmt::format("{} {}", cpus.size() == 1 ? "CPU" : "CPUs", list);
}

std::string describe_threads(std::string_view role, std::size_t count, const std::vector<int>& cpus,
                             bool pinned) {
  const std::string threads = fmt::format("{} {} thread{}", count, role, count == 1 ? "" : "s");
  if (!pinned) return threads + ", NOT pinned";
  return fmt::format("{} pinned to {}", threads, describe_cpus(cpus));
}

}  // namespace bench
