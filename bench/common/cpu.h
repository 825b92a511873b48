// CPU pinning for the benchmark threads. Busy-polling threads that share a
// core take turns by scheduler time slice, so each gets a core of its own
// when there are enough, and the setup text says when there are not.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace bench {

// CPUs this process may run on, ascending.
std::vector<int> allowed_cpus();

// Pins the calling thread to `cpu`. On failure prints a warning naming
// `who` and returns false.
bool pin_current_thread(int cpu, std::string_view who);

// Which CPU each client and server thread is pinned to.
struct CpuPlan {
  std::vector<int> client_cpus;  // one per client thread; empty: do not pin
  std::vector<int> server_cpus;  // one per server thread; empty: do not pin
  bool shared = false;           // some threads share a CPU
  std::string why_not_pinned;    // set when the vectors are empty
};

// Clients take the first allowed CPUs and servers the next ones (with one
// client and one server on CPUs {0, 1,...}: client on 0, server on 1). With
// more threads than CPUs they wrap around and share. With fewer than two
// allowed CPUs nothing is pinned: there is nothing to separate.
CpuPlan plan_cpus(std::size_t clients, std::size_t servers);

// "CPU 1" or "CPUs 1,2,3".
std::string describe_cpus(const std::vector<int>& cpus);

// For setup texts: "1 client thread pinned to CPU 0", "2 server threads
// pinned to CPUs 1,0", "1 client thread, NOT pinned".
std::string describe_threads(std::string_view role, std::size_t count, const std::vector<int>& cpus,
                             bool pinned);

}  // namespace bench
