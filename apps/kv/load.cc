#include "load.h"

#include <exception>
#include <thread>

namespace kv {

void LoadResult::merge(const LoadResult& other) {
  get_ns.merge(other.get_ns);
  put_ns.merge(other.put_ns);
  ops += other.ops;
  failures += other.failures;
  misses += other.misses;
  retransmissions += other.retransmissions;
  context_switches += other.context_switches;
  if (other.elapsed_s > elapsed_s) elapsed_s = other.elapsed_s;
  if (first_failure.empty()) first_failure = other.first_failure;
  if (transport.empty()) transport = other.transport;
}

void run_load_threads(uint16_t threads,
                      const std::function<void(uint16_t, std::atomic<uint16_t>&)>& body) {
  std::atomic<uint16_t> preloaded{0};
  std::vector<std::exception_ptr> errors(threads);
  std::vector<std::thread> running;
  for (uint16_t i = 0; i < threads; i++) {
    running.emplace_back([&, i] {
      try {
        body(i, preloaded);
      } catch (...) {
        errors[i] = std::current_exception();
        preloaded++;
      }
    });
  }
  for (auto& t : running) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

std::vector<std::string> all_keys(uint64_t records) {
  std::vector<std::string> keys;
  keys.reserve(records);
  for (uint64_t r = 0; r < records; r++) keys.push_back(key_name(r));
  return keys;
}

}  // namespace kv
