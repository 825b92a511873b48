// librpc-smr-client: the smr key-value store's client.
//
//   librpc-smr-client --peers 1=H:P,2=H:P,3=H:P put KEY VALUE
//   librpc-smr-client --peers ... get KEY
//   librpc-smr-client --peers ... stream --count N --acked FILE   (unique keys, one at a time;
//                                                          each acknowledged key in FILE)
//   librpc-smr-client --peers ... verify --acked FILE      (every acknowledged write reads back)
//   librpc-smr-client --peers ... history --clients C --ops N --keys K --out FILE
//   librpc-smr-client --peers ... bench --seconds S [--concurrency C] [--json FILE]
//
// history records every operation of C concurrent clients on K registers
// (one JSON object a line: client, op, key, value, invoke/complete times,
// outcome) for tools/smr_linearizability.py. bench measures the
// replicated commit latency of puts (client -> leader -> majority ->
// client) and the rate of small writes.
#include <fmt/core.h>
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "app_common.h"
#include "cli.h"
#include "client_session.h"
#include "histogram.h"
#include "librpc/rpc_all.h"
#include "output.h"
#include "run_info.h"
#include "smr_common.h"
#include "trust.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string peers;
  std::string uri;
  uint64_t attempt_timeout_ms = 1000;
  uint64_t deadline_ms = 10000;
  std::string key, value;
  uint64_t count = 100;
  std::string acked_path;
  uint64_t clients = 3, ops = 300, keys = 3;
  std::string out_path;
  uint64_t seconds = 5, concurrency = 1, value_bytes = 16, bench_keys = 1000;
  std::string json_path, csv_path;
  app::TransportOptions transport;
};

struct Env {
  rpc::Rpc& rpc;
  smr::SmrClient& client;
};

// Runs the loop until pred() or the deadline; false on the deadline.
template <typename Pred>
bool run_until(Env& env, Pred pred, Clock::duration limit) {
  const auto end = Clock::now() + limit;
  while (!pred()) {
    if (Clock::now() > end || app::g_stop_requested.load()) return false;
    env.rpc.run_event_loop_once();
    env.client.poll();
  }
  return true;
}

// One command, retried while its outcome is unknown (a retried put of the
// same value is harmless; a get has no effect).
std::optional<smr::KvReply> call(Env& env, const smr::KvCommand& cmd, Clock::duration limit) {
  const auto end = Clock::now() + limit;
  while (Clock::now() < end) {
    bool done = false;
    smr::Outcome outcome{};
    smr::KvReply reply;
    env.client.submit(cmd, [&](smr::Outcome o, const smr::KvReply& r) {
      done = true;
      outcome = o;
      reply = r;
    });
    if (!run_until(
            env, [&] { return done; }, limit))
      return std::nullopt;
    if (outcome == smr::Outcome::kOk) return reply;
    if (reply.status == smr::KvStatus::kBadRequest) return std::nullopt;
  }
  return std::nullopt;
}

int cmd_put_get(Env& env, const Options& opt, bool put) {
  smr::KvCommand cmd{put ? smr::KvOp::kPut : smr::KvOp::kGet, opt.key, put ? opt.value : ""};
  auto reply = call(env, cmd, std::chrono::milliseconds(opt.deadline_ms));
  if (!reply) {
    fmt::print(stderr, "smr_client: no replica applied the command\n");
    return app::kExitFailure;
  }
  if (put) {
    fmt::print("ok index={} leader={}\n", reply->index, env.client.leader());
  } else if (reply->found) {
    fmt::print("value={} index={} leader={}\n", reply->value, reply->index, env.client.leader());
  } else {
    fmt::print("not found index={} leader={}\n", reply->index, env.client.leader());
  }
  return app::kExitOk;
}

// Unique keys s<i> = v<i>, one at a time. A put whose outcome is unknown
// is retried (same key and value); only acknowledged ones are listed.
int cmd_stream(Env& env, const Options& opt) {
  std::ofstream acked(opt.acked_path);
  if (!acked) return fmt::print(stderr, "cannot write {}\n", opt.acked_path), app::kExitFailure;
  uint64_t ok = 0, failed = 0;
  fmt::print("streaming {} writes\n", opt.count);
  for (uint64_t i = 0; i < opt.count && !app::g_stop_requested.load(); i++) {
    smr::KvCommand cmd{smr::KvOp::kPut, fmt::format("s{}", i), fmt::format("v{}", i)};
    if (auto r = call(env, cmd, std::chrono::milliseconds(opt.deadline_ms))) {
      acked << cmd.key << ' ' << cmd.value << ' ' << r->index << '\n' << std::flush;
      ok++;
    } else {
      failed++;
    }
  }
  fmt::print("stream done: acked={} failed={} redirects={}\n", ok, failed, env.client.redirects());
  return failed == 0 ? app::kExitOk : app::kExitFailure;
}

int cmd_verify(Env& env, const Options& opt) {
  std::ifstream in(opt.acked_path);
  if (!in) return fmt::print(stderr, "cannot read {}\n", opt.acked_path), app::kExitFailure;
  std::string key, value;
  uint64_t index = 0, checked = 0, lost = 0;
  while (in >> key >> value >> index) {
    auto r = call(env, smr::KvCommand{smr::KvOp::kGet, key, ""},
                  std::chrono::milliseconds(opt.deadline_ms));
    checked++;
    if (!r || !r->found || r->value != value) {
      lost++;
      fmt::print("LOST {}={} (acked at index {}): {}\n", key, value, index,
                 !r ? "no answer" : (r->found ? "read " + r->value : "not found"));
    }
  }
  fmt::print("verify: checked={} lost={}\n", checked, lost);
  return lost == 0 && checked > 0 ? app::kExitOk : app::kExitFailure;
}

// Concurrent clients on a few registers, every operation recorded.
int cmd_history(Env& env, const Options& opt) {
  std::ofstream out(opt.out_path);
  if (!out) return fmt::print(stderr, "cannot write {}\n", opt.out_path), app::kExitFailure;
  const auto t0 = Clock::now();
  auto ns = [&t0] {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
  };
  std::mt19937_64 rng(std::random_device{}());
  uint64_t started = 0, finished = 0, n_ok = 0, n_fail = 0, n_unknown = 0, value_seq = 0;
  std::function<void(uint64_t)> start_one = [&](uint64_t client) {
    if (started >= opt.ops || app::g_stop_requested.load()) return;
    started++;
    const bool write = rng() % 2 == 0;
    smr::KvCommand cmd{write ? smr::KvOp::kPut : smr::KvOp::kGet,
                       fmt::format("r{}", rng() % opt.keys), ""};
    if (write) cmd.value = fmt::format("{}.{}", client, ++value_seq);  // unique per write
    const int64_t invoke = ns();
    env.client.submit(cmd, [&, client, cmd, invoke](smr::Outcome o, const smr::KvReply& r) {
      const int64_t complete = ns();
      finished++;
      const char* outcome = o == smr::Outcome::kOk       ? "ok"
                            : o == smr::Outcome::kFailed ? "fail"
                                                         : "info";
      (o == smr::Outcome::kOk ? n_ok : o == smr::Outcome::kFailed ? n_fail : n_unknown)++;
      std::string value = cmd.op == smr::KvOp::kPut ? cmd.value : (r.found ? r.value : "");
      const bool has_value = cmd.op == smr::KvOp::kPut || (o == smr::Outcome::kOk && r.found);
      out << fmt::format(
          "{{\"client\": {}, \"op\": \"{}\", \"key\": \"{}\", \"value\": {}, \"invoke_ns\": {}, "
          "\"complete_ns\": {}, \"outcome\": \"{}\", \"index\": {}}}\n",
          client, cmd.op == smr::KvOp::kPut ? "write" : "read", cmd.key,
          has_value ? "\"" + value + "\"" : "null", invoke, complete, outcome, r.index);
      start_one(client);
    });
  };
  for (uint64_t c = 0; c < opt.clients; c++) start_one(c);
  const bool done = run_until(
      env,
      [&] {
        return finished == started && env.client.in_flight() == 0 &&
               (started >= opt.ops || app::g_stop_requested.load());
      },
      std::chrono::seconds(120));
  fmt::print("history: ops={} ok={} fail={} info={} redirects={}\n", finished, n_ok, n_fail,
             n_unknown, env.client.redirects());
  return done ? app::kExitOk : app::kExitFailure;
}

// Closed loop: `concurrency` puts in flight, each timed from submit to
// acknowledgement (committed on a majority and applied by the leader).
int cmd_bench(Env& env, const Options& opt, measure::RunInfo& run_info) {
  // Warm up: find the leader.
  if (!call(env, smr::KvCommand{smr::KvOp::kPut, "warmup", "x"}, std::chrono::seconds(10))) {
    fmt::print(stderr, "smr_client: no leader\n");
    return app::kExitFailure;
  }
  measure::Histogram lat;
  measure::ContextSwitches cs;
  uint64_t seq = 0, ok = 0, not_ok = 0;
  const std::string value(opt.value_bytes, 'v');
  const auto end = Clock::now() + std::chrono::seconds(opt.seconds);
  const uint64_t retx0 = env.rpc.stats().retransmissions;
  std::function<void()> start_one = [&] {
    if (Clock::now() >= end) return;
    const auto t = Clock::now();
    env.client.submit(
        smr::KvCommand{smr::KvOp::kPut, fmt::format("b{}", seq++ % opt.bench_keys), value},
        [&, t](smr::Outcome o, const smr::KvReply&) {
          if (o == smr::Outcome::kOk) {
            ok++;
            lat.record(static_cast<uint64_t>(std::chrono::nanoseconds(Clock::now() - t).count()));
          } else {
            not_ok++;
          }
          start_one();
        });
  };
  cs.start();
  const auto t0 = Clock::now();
  for (uint64_t i = 0; i < opt.concurrency; i++) start_one();
  run_until(
      env, [&] { return env.client.in_flight() == 0; }, std::chrono::seconds(opt.seconds + 30));
  const double elapsed_s = std::chrono::duration<double>(Clock::now() - t0).count();
  cs.stop();
  run_info.finish();
  const double rate = static_cast<double>(ok) / elapsed_s;
  fmt::print(
      "{}-byte replicated puts over {} ({} in flight): commit p50 {:.1f} us, p99 {:.1f} us, "
      "max {:.1f} us; {:.0f} puts/s ({} ok, {} not)\n",
      opt.value_bytes, env.rpc.transport_name(), opt.concurrency, lat.percentile_us(50),
      lat.percentile_us(99), static_cast<double>(lat.max_ns()) / 1e3, rate, ok, not_ok);
  measure::Warnings warnings;
  warnings.add_and_print(measure::check_retransmissions(env.rpc.stats().retransmissions - retx0));
  warnings.add_and_print(measure::check_context_switches(cs.count()));
  warnings.add_and_print(measure::check_tail_gap(lat));
  if (!opt.json_path.empty() || !opt.csv_path.empty()) {
    measure::ResultFile file;
    file.transport = env.rpc.transport_name();
    file.workload = "smr_commit";
    file.setup = "librpc-smr-client closed loop against a libraft cluster of librpc-smr-replica";
    file.run = run_info.to_json();
    file.config = {{"replicas", opt.peers},
                   {"concurrency", opt.concurrency},
                   {"value_bytes", opt.value_bytes},
                   {"seconds", opt.seconds}};
    file.warnings = warnings.list();
    measure::Json r = {{"concurrency", opt.concurrency},
                       {"value_bytes", opt.value_bytes},
                       {"puts_ok", ok},
                       {"puts_not_ok", not_ok},
                       {"puts_per_s", measure::round_to(rate, 1)}};
    measure::add_rtt_fields(r, lat, false, "commit");
    file.results.push_back(r);
    measure::write_outputs(opt.json_path, opt.csv_path, file);
  }
  return ok > 0 && not_ok == 0 ? app::kExitOk : app::kExitFailure;
}

}  // namespace

int main(int argc, char** argv) {
  measure::RunInfo run_info(argc, argv);
  CLI::App cli("Client of the replicated key-value store (librpc-smr-replica).",
               "librpc-smr-client");
  Options opt;
  cli.add_option("--peers", opt.peers, "every replica: ID=HOST:PORT,...")->required();
  cli.add_option("--uri", opt.uri,
                 "this client's Nexus HOST:PORT (default: routed address, port 0)");
  cli.add_option("--attempt-timeout-ms", opt.attempt_timeout_ms,
                 "an unanswered attempt ends (outcome unknown) after this")
      ->capture_default_str();
  cli.add_option("--deadline-ms", opt.deadline_ms, "give a command up after this")
      ->capture_default_str();
  app::add_transport_options(cli, opt.transport);
  cli.require_subcommand(1);
  auto* put = cli.add_subcommand("put", "write KEY VALUE");
  put->add_option("key", opt.key)->required();
  put->add_option("value", opt.value)->required();
  auto* get = cli.add_subcommand("get", "read KEY");
  get->add_option("key", opt.key)->required();
  auto* stream = cli.add_subcommand("stream", "write unique keys one at a time");
  stream->add_option("--count", opt.count)->capture_default_str();
  stream->add_option("--acked", opt.acked_path, "file listing acknowledged writes")->required();
  auto* verify = cli.add_subcommand("verify", "read back every acknowledged write");
  verify->add_option("--acked", opt.acked_path)->required();
  auto* history = cli.add_subcommand("history", "record a concurrent register history");
  history->add_option("--clients", opt.clients)->capture_default_str();
  history->add_option("--ops", opt.ops)->capture_default_str();
  history->add_option("--keys", opt.keys)
      ->check(CLI::Range(uint64_t{1}, uint64_t{1000}))
      ->capture_default_str();
  history->add_option("--out", opt.out_path)->required();
  auto* bench = cli.add_subcommand("bench", "replicated commit latency and write rate");
  bench->add_option("--seconds", opt.seconds)->capture_default_str();
  bench->add_option("--concurrency", opt.concurrency)
      ->check(CLI::Range(uint64_t{1}, uint64_t{1024}))
      ->capture_default_str();
  bench->add_option("--value-bytes", opt.value_bytes)
      ->check(CLI::Range(uint64_t{0}, uint64_t{smr::kMaxValueBytes}))
      ->capture_default_str();
  bench->add_option("--keys", opt.bench_keys)->capture_default_str();
  measure::add_output_options(*bench, opt.json_path, opt.csv_path);
  if (auto status = measure::parse_command_line(cli, argc, argv)) return *status;
  auto peers = smr::parse_peers(opt.peers);
  if (!peers) return measure::usage_error(cli, "--peers: expected ID=HOST:PORT,...");

  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  app::install_stop_signals();
  try {
    std::string uri = opt.uri;
    if (uri.empty()) {
      auto local = app::local_address_towards(peers->begin()->second);
      if (!local) return fmt::print(stderr, "smr_client: {}\n", local.error()), app::kExitFailure;
      uri = *local + ":0";
    }
    rpc::Nexus nexus(rpc::NexusConfig{.uri = uri});
    smr::SmrClient* client_ptr = nullptr;
    rpc::RpcConfig config = opt.transport.rpc_config(0);
    config.session_callback = [&client_ptr](rpc::SessionNum sn, rpc::SessionEvent e, rpc::SmErr) {
      if (client_ptr != nullptr) client_ptr->on_session_event(sn, e);
    };
    rpc::Rpc rpc(nexus, config);
    int rc = app::kExitFailure;
    {
      smr::SmrClient client(rpc, *peers, std::chrono::milliseconds(opt.attempt_timeout_ms),
                            std::chrono::milliseconds(opt.deadline_ms));
      client_ptr = &client;
      Env env{rpc, client};
      if (*put) rc = cmd_put_get(env, opt, true);
      if (*get) rc = cmd_put_get(env, opt, false);
      if (*stream) rc = cmd_stream(env, opt);
      if (*verify) rc = cmd_verify(env, opt);
      if (*history) rc = cmd_history(env, opt);
      if (*bench) rc = cmd_bench(env, opt, run_info);
      // Let what is in flight finish before the client goes.
      run_until(
          env, [&] { return client.in_flight() == 0; }, std::chrono::seconds(5));
      client_ptr = nullptr;
    }
    return rc;
  } catch (const rpc::Error& e) {
    fmt::print(stderr, "smr_client: {}\n", e.what());
    return app::kExitFailure;
  }
}
