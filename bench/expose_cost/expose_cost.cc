// expose_cost: the time one bulk transfer spends on the security model,
// i.e. Transport::expose_for_read + revoke_exposure of a payload, by size,
// next to a plain local registration of the same bytes (register_memory +
// deregister_memory) for scale. Medians over --iters rounds. verbs exposes
// only to a peer with a connected RC QP, which this program has not: time
// verbs with mw_cost (same folder) instead.
//
//   expose_cost [--transport fabric|verbs|fake] [--fabric-provider P]
//               [--sizes 64K,1M,8M] [--iters N]   (--help lists them)
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cli.h"
#include "transport/transport.h"

using namespace rpc;
using namespace rpc::detail;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <typename F>
double time_us(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  RpcConfig config{.transport = "fabric", .fabric_provider = "tcp;ofi_rxm"};
  std::vector<size_t> sizes{size_t{64} << 10, size_t{1} << 20, size_t{8} << 20};
  int iters = 200;
  CLI::App app(
      "Times Transport::expose_for_read + revoke_exposure (the bulk security model's cost per "
      "transfer) next to register_memory + deregister_memory",
      "expose_cost");
  app.option_defaults()->always_capture_default();
  app.add_option("--transport", config.transport, "fabric, verbs or fake");
  app.add_option("--fabric-provider", config.fabric_provider, "fabric: the libfabric provider");
  measure::add_sizes_option(app, "--sizes", sizes, "payload sizes, K/M suffixes allowed", 1,
                            size_t{1} << 30)
      ->default_str("64K,1M,8M");
  app.add_option("--iters", iters, "rounds per size")->check(CLI::Range(1, 1 << 30));
  if (const auto status = measure::parse_command_line(app, argc, argv)) return *status;
  auto transport = make_transport(config, "127.0.0.1");
  if (!transport) {
    fmt::print(stderr, "expose_cost: {}\n", transport.error());
    return 1;
  }
  Transport& t = **transport;
  fmt::print("transport {} ({}), {} rounds, medians in microseconds\n", t.name(), t.provider(),
             iters);
  fmt::print("{:>10} {:>18} {:>18}\n", "bytes", "expose+revoke", "register+dereg");
  for (size_t size : sizes) {
    std::vector<uint8_t> mem(size, 1);  // touched: pages exist
    auto reg = t.register_memory(mem.data(), mem.size());
    if (!reg) {
      fmt::print(stderr, "expose_cost: {}\n", reg.error());
      return 1;
    }
    std::vector<double> expose_us;
    std::vector<double> register_us;
    bool exposes =
        true;  // false where the transport has no bulk path (shm, udp) or no peer (verbs)
    for (int i = 0; i < iters; i++) {
      if (exposes) {
        expose_us.push_back(time_us([&] {
          Exposure e;
          exposes = t.expose_for_read(RoutingInfo{}, mem.data(), mem.size(), *reg, e);
          t.revoke_exposure(e);
        }));
      }
      register_us.push_back(time_us([&] {
        auto r = t.register_memory(mem.data(), mem.size());
        if (r) t.deregister_memory(*r);
      }));
    }
    t.deregister_memory(*reg);
    const std::string expose =
        exposes ? fmt::format("{:.2f}", median(expose_us)) : std::string("refused (no bulk)");
    fmt::print("{:>10} {:>18} {:>18.2f}\n", size, expose, median(register_us));
  }
  return 0;
}
