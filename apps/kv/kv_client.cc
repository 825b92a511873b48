// librpc-kv-client: the key-value service's command-line client and load
// generator.
//
//   librpc-kv-client [--server HOST:PORT] get KEY
//   librpc-kv-client [--server HOST:PORT] put KEY VALUE
//   librpc-kv-client [--server HOST:PORT] delete KEY
//   librpc-kv-client [--server HOST:PORT] load [--backend librpc|memcached]
//       [--workload a|b|c] [--keys N] [--distribution zipfian|uniform]
//       [--value-bytes N] [--value-bytes-max N] [--threads N] [--outstanding N]
//       [--warmup-ms N] [--duration-ms N] [--json FILE] [--csv FILE]
//
// `load` runs a YCSB workload closed-loop and prints throughput and
// round-trip percentiles per operation; with --backend memcached it drives a
// memcached server through libmemcached instead, with the same generator.
#include <fmt/core.h>

#include <cstdio>
#include <optional>
#include <span>
#include <string>

#include "../app_common.h"
#include "cli.h"
#include "client.h"
#include "librpc/rpc_all.h"
#include "load_librpc.h"
#include "load_memcached.h"
#include "output.h"
#include "run_info.h"
#include "trust.h"

namespace {

constexpr auto kConnectTimeout = std::chrono::seconds(10);
constexpr auto kRequestTimeout = std::chrono::seconds(5);
constexpr const char* kDefaultKvServer = "127.0.0.1:31860";
constexpr const char* kDefaultMemcached = "127.0.0.1:11211";

struct Options {
  std::string server;  // default by backend
  std::string uri;     // this client's Nexus; default: the address towards the server
  app::TransportOptions transport;
  std::string key, value;
  std::string backend = "librpc";
  std::string distribution = "zipfian";
  kv::LoadOptions load;
  uint64_t warmup_ms = 500, duration_ms = 3000;
  bool no_preload = false;
  std::string json_path, csv_path;
};

int fail(const std::string& what) {
  fmt::print(stderr, "kv_client: {}\n", what);
  return app::kExitFailure;
}

std::string local_uri(const Options& opt) {
  if (!opt.uri.empty()) return opt.uri;
  auto local = app::local_address_towards(opt.server);
  if (!local) throw rpc::Error(local.error() + "; give --uri");
  return *local + ":0";
}

// get / put / delete: one request, the answer on stdout.
int run_single(const std::string& command, const Options& opt) {
  rpc::Nexus nexus(rpc::NexusConfig{.uri = local_uri(opt)});
  rpc::Rpc rpc(nexus, opt.transport.rpc_config(0));
  auto client = kv::Client::connect(rpc, opt.server, kConnectTimeout);
  if (!client) return fail(client.error());
  if (command == "get") {
    auto value = client->get_sync(opt.key, kRequestTimeout);
    if (!value) return fail(value.error());
    if (!*value) return fail(fmt::format("'{}' not found", opt.key));
    fmt::print("{}\n", **value);
  } else if (command == "put") {
    const auto bytes = std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(opt.value.data()),
                                                opt.value.size());
    if (auto ok = client->put_sync(opt.key, bytes, kRequestTimeout); !ok) return fail(ok.error());
    fmt::print("stored\n");
  } else {
    auto deleted = client->del_sync(opt.key, kRequestTimeout);
    if (!deleted) return fail(deleted.error());
    fmt::print("{}\n", *deleted ? "deleted" : "not found");
  }
  return app::kExitOk;
}

measure::Json op_result(const char* op, const measure::Histogram& h, double elapsed_s) {
  measure::Json o;
  o["op"] = op;
  o["ops"] = h.count();
  o["throughput_ops_per_s"] = measure::round_to(static_cast<double>(h.count()) / elapsed_s, 0);
  measure::add_rtt_fields(o, h, /*with_cdf=*/true);
  return o;
}

int run_load(const CLI::App& cli, Options& opt, measure::RunInfo& run_info) {
  const bool memcached = opt.backend == "memcached";
  opt.load.workload.distribution =
      opt.distribution == "uniform" ? kv::KeyDistribution::kUniform : kv::KeyDistribution::kZipfian;
  if (opt.load.workload.value_bytes_max < opt.load.workload.value_bytes_min) {
    opt.load.workload.value_bytes_max = opt.load.workload.value_bytes_min;
  }
  opt.load.warmup = std::chrono::milliseconds(opt.warmup_ms);
  opt.load.duration = std::chrono::milliseconds(opt.duration_ms);
  opt.load.preload = !opt.no_preload;
  opt.load.server = opt.server;
  if (memcached && opt.load.outstanding != 1) {
    return measure::usage_error(cli,
                                "--outstanding must be 1 with --backend memcached: libmemcached's "
                                "calls block until their reply (use --threads for more in flight)");
  }

  const kv::LoadResult r = memcached ? kv::run_memcached_load(opt.load)
                                     : kv::run_librpc_load(opt.load, opt.transport, local_uri(opt));
  run_info.finish();
  measure::Histogram all = r.get_ns;
  all.merge(r.put_ns);
  const kv::WorkloadSpec& w = opt.load.workload;
  const std::string system = memcached ? "memcached" : "librpc-kv";
  fmt::print(
      "{} over {}: YCSB-{} {}, {} keys, {}-{} B values, {} thread(s) x {} outstanding: "
      "{:.0f} ops/s\n",
      system, r.transport, static_cast<char>(w.mix - 'a' + 'A'), opt.distribution, w.keys,
      w.value_bytes_min, w.value_bytes_max, opt.load.threads, opt.load.outstanding,
      static_cast<double>(r.ops) / r.elapsed_s);
  fmt::print("{}\n  op   {}\n", measure::kRttNote, measure::rtt_header());
  if (all.count() > 0) fmt::print("  all  {}\n", measure::rtt_row(all));
  if (r.get_ns.count() > 0) fmt::print("  get  {}\n", measure::rtt_row(r.get_ns));
  if (r.put_ns.count() > 0) fmt::print("  put  {}\n", measure::rtt_row(r.put_ns));

  measure::Warnings warnings;
  if (!memcached) warnings.add_and_print(measure::check_retransmissions(r.retransmissions));
  // The librpc load threads busy-poll; libmemcached's block in the kernel.
  warnings.add_and_print(measure::check_load(run_info, memcached ? 0 : opt.load.threads));
  if (!memcached) warnings.add_and_print(measure::check_context_switches(r.context_switches));
  warnings.add_and_print(measure::check_tail_gap(all));
  if (!warnings.list().empty()) fmt::print("  (the percentiles above are not trustworthy)\n");
  if (r.misses > 0) {
    fmt::print("  {} GETs found no value{}\n", r.misses,
               opt.load.preload ? " (after a preload: values were lost)" : "");
  }

  if (!opt.json_path.empty() || !opt.csv_path.empty()) {
    measure::ResultFile file;
    file.system = system;
    file.transport = r.transport;
    file.workload = fmt::format("ycsb-{}", w.mix);
    file.setup = fmt::format("{} load thread(s) x {} outstanding against {}", opt.load.threads,
                             opt.load.outstanding, opt.server);
    file.run = run_info.to_json();
    file.config = {{"backend", opt.backend},
                   {"workload", std::string(1, w.mix)},
                   {"keys", w.keys},
                   {"distribution", opt.distribution},
                   {"zipf_theta", w.zipf_theta},
                   {"value_bytes_min", w.value_bytes_min},
                   {"value_bytes_max", w.value_bytes_max},
                   {"threads", opt.load.threads},
                   {"outstanding", opt.load.outstanding},
                   {"warmup_ms", opt.warmup_ms},
                   {"duration_ms", opt.duration_ms},
                   {"preload", opt.load.preload},
                   {"seed", w.seed}};
    file.warnings = warnings.list();
    file.results.push_back(op_result("all", all, r.elapsed_s));
    file.results.back()["failures"] = r.failures;
    file.results.back()["misses"] = r.misses;
    if (r.get_ns.count() > 0) file.results.push_back(op_result("get", r.get_ns, r.elapsed_s));
    if (r.put_ns.count() > 0) file.results.push_back(op_result("put", r.put_ns, r.elapsed_s));
    measure::write_outputs(opt.json_path, opt.csv_path, file);
  }
  if (r.failures > 0) {
    return fail(fmt::format("{} requests failed; the first: {}", r.failures, r.first_failure));
  }
  // After a preload every GET must find its key: a miss is a lost write.
  if (r.misses > 0 && opt.load.preload) return app::kExitFailure;
  return app::kExitOk;
}

void add_load_options(CLI::App& load, Options& opt) {
  kv::WorkloadSpec& w = opt.load.workload;
  load.add_option("--backend", opt.backend,
                  "librpc (the kv service) or memcached (through libmemcached)")
      ->check(CLI::IsMember({"librpc", "memcached"}))
      ->capture_default_str();
  load.add_option("--workload", w.mix, "YCSB mix: a (50% reads), b (95%), c (100%)")
      ->check(CLI::IsMember({'a', 'b', 'c'}))
      ->capture_default_str();
  load.add_option("--keys", w.keys, "records in the key space")
      ->check(CLI::Range(uint64_t{2}, uint64_t{100'000'000}))
      ->capture_default_str();
  load.add_option("--distribution", opt.distribution,
                  "key popularity: zipfian (theta 0.99) or uniform")
      ->check(CLI::IsMember({"zipfian", "uniform"}))
      ->capture_default_str();
  measure::add_size_option(load, "--value-bytes", w.value_bytes_min,
                           "value size of PUTs (the smallest, with --value-bytes-max)", 0,
                           kv::kMaxValueBytes)
      ->capture_default_str();
  measure::add_size_option(load, "--value-bytes-max", w.value_bytes_max,
                           "largest value size: PUTs draw sizes uniformly in between; the "
                           "preload writes this size",
                           0, kv::kMaxValueBytes);
  load.add_option("--threads", opt.load.threads, "load threads (one Rpc or connection each)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  load.add_option("--outstanding", opt.load.outstanding, "requests in flight per thread (librpc)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  load.add_option("--warmup-ms", opt.warmup_ms, "load before measuring")->capture_default_str();
  load.add_option("--duration-ms", opt.duration_ms, "measured time")
      ->check(CLI::Range(uint64_t{1}, uint64_t{86'400'000}))
      ->capture_default_str();
  load.add_option("--seed", w.seed, "workload seed")->capture_default_str();
  load.add_flag("--no-preload", opt.no_preload, "do not put every record before measuring");
  measure::add_output_options(load, opt.json_path, opt.csv_path);
}

}  // namespace

int main(int argc, char** argv) {
  measure::RunInfo run_info(argc, argv);
  CLI::App cli("Client and load generator of the librpc key-value service.", "librpc-kv-client");
  Options opt;
  cli.add_option("--server", opt.server,
                 "the server's HOST:PORT (default: 127.0.0.1:31860, or 127.0.0.1:11211 for "
                 "memcached)");
  cli.add_option("--uri", opt.uri,
                 "this client's Nexus HOST:PORT (default: the local address that routes to the "
                 "server, port 0)");
  app::add_transport_options(cli, opt.transport);
  cli.require_subcommand(1);
  CLI::App* get = cli.add_subcommand("get", "print KEY's value");
  get->add_option("key", opt.key, "the key")->required();
  CLI::App* put = cli.add_subcommand("put", "store VALUE under KEY");
  put->add_option("key", opt.key, "the key")->required();
  put->add_option("value", opt.value, "the value")->required();
  CLI::App* del = cli.add_subcommand("delete", "delete KEY");
  del->add_option("key", opt.key, "the key")->required();
  CLI::App* load = cli.add_subcommand("load", "run a YCSB workload and measure it");
  add_load_options(*load, opt);
  if (auto status = measure::parse_command_line(cli, argc, argv)) return *status;
  if (opt.server.empty())
    opt.server = opt.backend == "memcached" ? kDefaultMemcached : kDefaultKvServer;

  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  try {
    if (load->parsed()) return run_load(cli, opt, run_info);
    return run_single(get->parsed() ? "get" : put->parsed() ? "put" : "delete", opt);
  } catch (const std::exception& e) {
    return fail(e.what());
  }
}
