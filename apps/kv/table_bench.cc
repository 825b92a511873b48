// kv_table_bench: the measurement behind kv::Table's choice of hash table
// (docs/apps.md, "Choosing the table"). Each candidate serves a YCSB-B mix
// (95% lookups, zipfian keys, 32-byte values) from one thread, as one
// partition of librpc-kv-server does, with repetitions interleaved
// (A B A B ...) and the median reported:
//   - kv::Table: std::unordered_map, looked up by string_view (no key copy);
//   - libcuckoo's cuckoohash_map (Debian's libcuckoo-dev), the concurrent
//     table the issue suggests, used from one thread;
//   - the same cuckoohash_map shared by two threads (the design without
//     partitions, where any server thread takes any key), aggregate rate.
//
//   kv_table_bench [--keys N] [--ops N] [--repetitions N]
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <libcuckoo/cuckoohash_map.hh>
#include <string>
#include <thread>
#include <vector>

#include "cli.h"
#include "table.h"
#include "workload.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  uint64_t keys = 100'000;
  uint64_t ops = 2'000'000;
  uint32_t repetitions = 5;
};

// The ops of one run, drawn before timing so the generator is not timed.
std::vector<kv::Workload::Op> draw_ops(const Options& opt, uint64_t stream) {
  kv::Workload w(kv::WorkloadSpec{.mix = 'b', .keys = opt.keys}, stream);
  std::vector<kv::Workload::Op> ops(opt.ops);
  for (auto& op : ops) op = w.next();
  return ops;
}

const std::string kValue(32, 'v');
const auto kValueBytes =
    std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(kValue.data()), kValue.size());

double run_table(const std::vector<std::string>& keys, const std::vector<kv::Workload::Op>& ops) {
  kv::Table table(size_t{1} << 34);
  for (const auto& k : keys) table.put(k, kValueBytes);
  size_t found_bytes = 0;
  const auto start = Clock::now();
  for (const auto& op : ops) {
    if (op.kind == kv::OpKind::kGet) {
      if (const std::string* v = table.get(keys[op.record])) found_bytes += v->size();
    } else {
      table.put(keys[op.record], kValueBytes);
    }
  }
  const double s = std::chrono::duration<double>(Clock::now() - start).count();
  if (found_bytes == 0) fmt::print("(no hits?)\n");
  return static_cast<double>(ops.size()) / s;
}

using Cuckoo = libcuckoo::cuckoohash_map<std::string, std::string>;

void cuckoo_ops(Cuckoo& table, const std::vector<std::string>& keys,
                const std::vector<kv::Workload::Op>& ops, size_t& found_bytes) {
  for (const auto& op : ops) {
    if (op.kind == kv::OpKind::kGet) {
      // A GET copies the value out, as the server copies into the response.
      table.find_fn(keys[op.record], [&](const std::string& v) { found_bytes += v.size(); });
    } else {
      table.insert_or_assign(keys[op.record], kValue);
    }
  }
}

double run_cuckoo(const std::vector<std::string>& keys,
                  const std::vector<std::vector<kv::Workload::Op>>& per_thread_ops) {
  Cuckoo table;
  for (const auto& k : keys) table.insert(k, kValue);
  std::vector<size_t> found(per_thread_ops.size());
  const auto start = Clock::now();
  std::vector<std::thread> threads;
  for (size_t t = 1; t < per_thread_ops.size(); t++) {
    threads.emplace_back([&, t] { cuckoo_ops(table, keys, per_thread_ops[t], found[t]); });
  }
  cuckoo_ops(table, keys, per_thread_ops[0], found[0]);
  for (auto& th : threads) th.join();
  const double s = std::chrono::duration<double>(Clock::now() - start).count();
  size_t total_ops = 0;
  for (const auto& ops : per_thread_ops) total_ops += ops.size();
  return static_cast<double>(total_ops) / s;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App cli("Compares hash tables for one kv partition (YCSB-B, zipfian, 32 B values).",
               "kv_table_bench");
  Options opt;
  cli.add_option("--keys", opt.keys, "records")
      ->check(CLI::Range(uint64_t{2}, uint64_t{1} << 26))
      ->capture_default_str();
  cli.add_option("--ops", opt.ops, "operations per run")->capture_default_str();
  cli.add_option("--repetitions", opt.repetitions, "runs of each, interleaved")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  if (auto status = measure::parse_command_line(cli, argc, argv)) return *status;

  const std::vector<std::string> keys = [&] {
    std::vector<std::string> k;
    for (uint64_t r = 0; r < opt.keys; r++) k.push_back(kv::key_name(r));
    return k;
  }();
  const auto ops0 = draw_ops(opt, 0), ops1 = draw_ops(opt, 1);
  std::vector<double> table_rate, cuckoo_rate, cuckoo2_rate;
  for (uint32_t r = 0; r < opt.repetitions; r++) {
    table_rate.push_back(run_table(keys, ops0));
    cuckoo_rate.push_back(run_cuckoo(keys, {ops0}));
    cuckoo2_rate.push_back(run_cuckoo(keys, {ops0, ops1}));
  }
  fmt::print("YCSB-B, zipfian, {} keys, {} ops per run, median of {} interleaved runs:\n", opt.keys,
             opt.ops, opt.repetitions);
  fmt::print("  kv::Table (std::unordered_map), 1 thread:  {:6.2f} Mops/s\n",
             median(table_rate) / 1e6);
  fmt::print("  libcuckoo cuckoohash_map, 1 thread:         {:6.2f} Mops/s\n",
             median(cuckoo_rate) / 1e6);
  fmt::print("  libcuckoo cuckoohash_map, 2 threads shared: {:6.2f} Mops/s (aggregate)\n",
             median(cuckoo2_rate) / 1e6);
  return 0;
}
