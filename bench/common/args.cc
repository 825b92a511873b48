// Command-line helpers shared by the benchmarks.
#include "common/args.h"

#include <fmt/core.h>

#include <charconv>
#include <map>

namespace bench {
namespace {

// CLI11 validator form of check_uri().
CLI::Validator uri_validator(bool allow_port_zero) {
  return CLI::Validator(
      [allow_port_zero](std::string& text) -> std::string {
        try {
          check_uri("URI", text, allow_port_zero);
          return "";
        } catch (const UsageError& e) {
          return e.what();
        }
      },
      "", "uri");
}

CLI::Option* add_on_off(CLI::App& app, const std::string& name, std::function<void(bool)> set,
                        const std::string& description) {
  return app
      .add_option_function<std::string>(
          name, [set = std::move(set)](const std::string& v) { set(v == "on"); }, description)
      ->check(CLI::IsMember({"on", "off"}).description(""))
      ->type_name("on|off");
}

}  // namespace

void check_uri(std::string_view flag, std::string_view text, bool allow_port_zero) {
  const auto colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 == text.size()) {
    throw UsageError(fmt::format("{}: '{}' is not of the form HOST:PORT", flag, text));
  }
  const std::string_view port_text = text.substr(colon + 1);
  unsigned port = 0;
  const auto [ptr, ec] =
      std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc() || ptr != port_text.data() + port_text.size() || port > 65535 ||
      (port == 0 && !allow_port_zero)) {
    throw UsageError(
        fmt::format("{}: '{}' has no valid port ({}-65535)", flag, text, allow_port_zero ? 0 : 1));
  }
}

std::string_view mode_name(Mode mode) {
  switch (mode) {
    case Mode::kServer:
      return "server";
    case Mode::kClient:
      return "client";
    case Mode::kBoth:
      break;
  }
  return "both";
}

std::string mtu_name(std::size_t mtu) { return mtu == 0 ? "auto" : fmt::format("{}", mtu); }

void configure_app(CLI::App& app) {
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.option_defaults()->always_capture_default();
  app.get_formatter()->column_width(30);
}

void add_endpoint_options(CLI::App& app, EndpointOptions& ep) {
  const rpc::RpcConfig rc{};
  const rpc::NexusConfig nc{};
  CLI::App& g = *app.add_option_group("Endpoint", "Where the server and client run, how they talk");
  g.add_option("--mode", ep.mode,
               "both: server + client in this process; server: serve until SIGINT/SIGTERM; "
               "client: measure against --server-uri")
      ->transform(CLI::CheckedTransformer(std::map<std::string, Mode>{{"both", Mode::kBoth},
                                                                      {"server", Mode::kServer},
                                                                      {"client", Mode::kClient}},
                                          CLI::ignore_case)
                      .description(""))
      ->type_name("both|server|client")
      ->default_str("both");
  g.add_option_function<std::string>(
       "--server-uri", [&ep](const std::string& v) { ep.server_uri = v; },
       "server Nexus URI (required in server and client mode; both mode: 127.0.0.1:0)")
      ->type_name("HOST:PORT");  // checked once the mode is known
  g.add_option_function<std::string>(
       "--client-uri", [&ep](const std::string& v) { ep.client_uri = v; },
       "client Nexus URI (client mode; default: the local address that routes to the server, "
       "port 0)")
      ->check(uri_validator(/*allow_port_zero=*/true))
      ->type_name("HOST:PORT");
  g.add_option("--transport", ep.transport,
               "RpcConfig.transport: udp, samehost, verbs, fabric, fake")
      ->check(CLI::Validator([](std::string& v) { return v.empty() ? "empty name" : ""; }, "NAME"));
  g.add_option("--mtu", ep.mtu,
               "RpcConfig.mtu_bytes (0: the transport's own packet size, udp 1500, fabric shm "
               "4096); must match the server's")
      ->check(CLI::Range(0, 65535));
  g.add_option("--verbs-device", ep.verbs_device,
               "verbs: the RDMA device (default: the first with an active port)");
  g.add_option_function<std::string>(
       "--gid-index",
       [&ep](const std::string& v) { ep.gid_index = v == "auto" ? -1 : std::stoi(v); },
       "verbs: the GID index to address the port by (auto: the RoCEv2 GID of the Nexus's IP, "
       "else one with an address)")
      ->check((CLI::IsMember({"auto"}) | CLI::Range(0, 65535)).description(""))
      ->type_name("N|auto")
      ->default_str("auto");
  add_on_off(
      g, "--udp-offload", [&ep](bool on) { ep.udp_offload = on; },
      "udp: UDP GSO sends and GRO receives where the kernel has them")
      ->default_str("on");
  g.add_option("--verbs-bulk", ep.verbs_bulk,
               "verbs: auto (DC on mlx5 NICs, else RC), rc, dc, off (large messages as "
               "datagrams)")
      ->transform(CLI::CheckedTransformer(
                      std::map<std::string, rpc::VerbsBulk>{{"auto", rpc::VerbsBulk::kAuto},
                                                            {"rc", rpc::VerbsBulk::kRc},
                                                            {"dc", rpc::VerbsBulk::kDc},
                                                            {"off", rpc::VerbsBulk::kOff}})
                      .description(""))
      ->type_name("auto|rc|dc|off")
      ->default_str("auto");
  g.add_option("--fabric-provider", ep.fabric_provider,
               "fabric: the libfabric provider (efa, tcp;ofi_rxm, shm; default: the first with "
               "RDM endpoints)");
  g.add_option("--sm-timeout-ms", ep.sm_timeout_ms, "NexusConfig.sm_timeout_ms: connect timeout")
      ->check(CLI::Range(1, 3'600'000))
      ->default_str(std::to_string(nc.sm_timeout_ms));
  g.add_option("--failure-timeout-ms", ep.failure_timeout_ms,
               "NexusConfig.failure_timeout_ms: a silent peer is declared failed after this "
               "long; raise it where a busy-polling peer may not get a CPU for a while")
      ->check(CLI::Range(1, 3'600'000))
      ->default_str(std::to_string(nc.failure_timeout_ms));
  measure::add_size_option(g, "--bulk-threshold", ep.bulk_threshold_bytes,
                           "RpcConfig.bulk_threshold_bytes: larger messages go by one-sided read "
                           "where the transport has it (a huge value keeps every message on "
                           "datagrams)",
                           1, std::uint64_t{1} << 40)
      ->default_str(std::to_string(rc.bulk_threshold_bytes));
  g.add_option("--credits", ep.session_credits,
               "RpcConfig.session_credits: packets in flight per session (a session gets the "
               "smaller of both ends')")
      ->check(CLI::Range(8, 65535))
      ->default_str(std::to_string(rc.session_credits));
  add_on_off(
      g, "--cc", [&ep](bool on) { ep.congestion_control = on; },
      "RpcConfig.congestion_control: Timely rate control and pacing of a client's sessions")
      ->default_str(rc.congestion_control ? "on" : "off");
  g.add_option("--cc-link-gbps", ep.cc_link_gbps, "RpcConfig.cc_link_gbps: the full rate")
      ->check(measure::positive_double())
      ->default_str(fmt::format("{}", rc.cc_link_gbps));
  g.add_option("--cc-t-low-us", ep.cc_t_low_us,
               "RpcConfig.cc_t_low_us: Timely's low threshold above a session's base RTT")
      ->check(CLI::Range(1, 1'000'000))
      ->default_str(std::to_string(rc.cc_t_low_us));
  g.add_option("--cc-t-high-us", ep.cc_t_high_us,
               "RpcConfig.cc_t_high_us: Timely's high threshold above a session's base RTT")
      ->check(CLI::Range(1, 1'000'000))
      ->default_str(std::to_string(rc.cc_t_high_us));
}

bool any_given(const CLI::App& group) {
  for (const CLI::Option* opt : group.get_options()) {
    if (opt->count() > 0 && opt->get_name() != "--help") return true;
  }
  return false;
}

void check_endpoint_options(const EndpointOptions& ep, bool client_flag_given,
                            std::string_view client_flags) {
  if (ep.mode == Mode::kServer && client_flag_given) {
    throw UsageError(fmt::format("{} are client options", client_flags));
  }
  if (ep.mode == Mode::kServer && ep.client_uri) {
    throw UsageError("--client-uri is not valid in server mode");
  }
  if (ep.mode == Mode::kBoth && ep.client_uri) {
    throw UsageError("--client-uri is not valid in both mode (one Nexus serves both sides)");
  }
  if (ep.mode != Mode::kBoth && !ep.server_uri) {
    throw UsageError("server and client modes require --server-uri HOST:PORT");
  }
  if (ep.server_uri) {
    // A server may bind port 0 (it prints the real one); a client must name it.
    check_uri("--server-uri", *ep.server_uri, /*allow_port_zero=*/ep.mode != Mode::kClient);
  }
}

}  // namespace bench
