// librpc-kv-server: the key-value service. One Rpc per thread, Rpc i owning
// partition i of the keys (kv::partition_of), each with its own table; runs
// until SIGINT/SIGTERM or for --seconds.
//
//   librpc-kv-server [--uri HOST:PORT] [--threads N] [--capacity BYTES] [--seconds N]
//                    [--transport udp|verbs|fabric]
#include <fmt/core.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <deque>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "../app_common.h"
#include "cli.h"
#include "librpc/rpc_all.h"
#include "service.h"

namespace {

struct Options {
  std::string uri = "127.0.0.1:31860";
  uint16_t threads = 1;
  uint64_t capacity_bytes = uint64_t{1} << 30;
  uint64_t seconds = 0;  // 0: until SIGINT/SIGTERM
  app::TransportOptions transport;
};

bool should_stop(std::chrono::steady_clock::time_point end, uint64_t seconds) {
  return app::g_stop_requested.load(std::memory_order_relaxed) ||
         (seconds != 0 && std::chrono::steady_clock::now() >= end);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App cli("The librpc key-value service: GET, PUT and DELETE, keys partitioned over threads.",
               "librpc-kv-server");
  Options opt;
  cli.add_option("--uri", opt.uri, "address HOST:PORT of this server's Nexus")
      ->capture_default_str();
  cli.add_option("--threads", opt.threads, "server threads, one Rpc and one partition each")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  measure::add_size_option(cli, "--capacity", opt.capacity_bytes,
                           "bytes of keys and values held, over all partitions (a PUT beyond "
                           "it is refused)");
  cli.add_option("--seconds", opt.seconds,
                 "stop after N seconds (default: run until SIGINT/SIGTERM)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 30));
  app::add_transport_options(cli, opt.transport);
  if (auto status = measure::parse_command_line(cli, argc, argv)) return *status;

  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  app::install_stop_signals();
  try {
    rpc::Nexus nexus(rpc::NexusConfig{.uri = opt.uri});
    if (auto ok = kv::register_handlers(nexus); !ok) {
      fmt::print(stderr, "kv_server: {}\n", ok.error());
      return app::kExitFailure;
    }
    std::deque<kv::Partition> partitions;
    for (uint16_t i = 0; i < opt.threads; i++) {
      partitions.emplace_back(i, opt.threads, opt.capacity_bytes / opt.threads);
    }
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(opt.seconds);
    std::atomic<int> started{0}, failed{0};
    std::vector<std::thread> threads;
    for (uint16_t i = 0; i < opt.threads; i++) {
      threads.emplace_back([&, i] {
        try {
          rpc::RpcConfig config = opt.transport.rpc_config(static_cast<rpc::RpcId>(i));
          config.context = &partitions[i];
          rpc::Rpc rpc(nexus, config);
          if (i == 0) {
            fmt::print("kv_server listening on {} ({} partitions, transport {})\n", nexus.uri(),
                       opt.threads, rpc.transport_name());
          }
          started++;
          while (!should_stop(end, opt.seconds)) rpc.run_event_loop(std::chrono::milliseconds(100));
          fmt::print("kv_server: partition {}: {} requests, {} keys, {} bytes, {} refused\n", i,
                     rpc.stats().handlers_run, partitions[i].table.size(),
                     partitions[i].table.used_bytes(), partitions[i].refused);
        } catch (const std::exception& e) {
          fmt::print(stderr, "kv_server: partition {}: {}\n", i, e.what());
          failed++;
          app::g_stop_requested = true;
        }
      });
    }
    for (auto& t : threads) t.join();
    return failed == 0 ? app::kExitOk : app::kExitFailure;
  } catch (const rpc::Error& e) {
    fmt::print(stderr, "kv_server: cannot serve on {}: {}\n", opt.uri, e.what());
    return app::kExitFailure;
  }
}
