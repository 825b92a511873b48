// The closed-loop load generator behind `librpc-kv-client load`: the same
// YCSB workload (workload.h) driven against the librpc key-value service or
// against memcached, so the two are measured with one generator, one key
// set and one set of clocks.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "histogram.h"
#include "workload.h"

namespace kv {

struct LoadOptions {
  WorkloadSpec workload;
  std::string server;  // HOST:PORT of the kv server or of memcached
  uint16_t threads = 1;
  // Requests each thread keeps in flight (librpc); memcached's client
  // library blocks on each call, so 1 there.
  uint32_t outstanding = 1;
  std::chrono::milliseconds warmup{500};
  std::chrono::milliseconds duration{3000};
  // Put every record once before measuring, so that every GET finds its key.
  bool preload = true;
};

struct LoadResult {
  measure::Histogram get_ns, put_ns;
  uint64_t ops = 0;               // completed in the measured window
  uint64_t failures = 0;          // requests that failed (any phase), each reported once
  uint64_t misses = 0;            // GETs that found no value (none expected after preload)
  uint64_t retransmissions = 0;   // librpc only
  uint64_t context_switches = 0;  // involuntary, of the load threads
  double elapsed_s = 0;
  std::string first_failure;  // what the first failure was, for the report
  std::string transport;      // "udp", ... for librpc; "tcp" for memcached
  void merge(const LoadResult& other);
};

// Runs body(index, preloaded) on `threads` threads and rethrows the first
// exception one of them threw. `preloaded` counts the threads done with
// their preload (each waits for all before measuring); a thread that throws
// is counted too, so the others do not wait for it forever.
void run_load_threads(uint16_t threads,
                      const std::function<void(uint16_t, std::atomic<uint16_t>&)>& body);

// Every record's key, built once (key_name() formats).
std::vector<std::string> all_keys(uint64_t records);

}  // namespace kv
