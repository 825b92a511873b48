// Command-line helpers shared by the benchmarks (CLI11, with the size and
// exit-status conventions of tools/measure/cli.h): the two error kinds that
// map to exit codes, and the endpoint options every benchmark takes
// (--mode, --server-uri, --client-uri, --transport, --mtu, ...).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include <CLI/CLI.hpp>

#include "cli.h"
#include "librpc/config.h"

namespace bench {

// Bad command line: reported with the --help hint, exit status 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Operational failure: exit status 1.
struct RunError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

inline constexpr std::size_t kDefaultMtu = 0;  // RpcConfig's: the transport's own

using measure::format_size;

// "host:port" with a non-empty host and a numeric port (0 allowed where a
// Nexus binds; resolution is left to librpc). Throws UsageError naming flag.
void check_uri(std::string_view flag, std::string_view text, bool allow_port_zero);

enum class Mode { kBoth, kServer, kClient };
std::string_view mode_name(Mode mode);

// Where the server and client run and how they talk.
struct EndpointOptions {
  Mode mode = Mode::kBoth;
  std::optional<std::string> server_uri;
  std::optional<std::string> client_uri;
  std::string transport = "udp";
  std::size_t mtu = kDefaultMtu;
  std::string verbs_device;  // empty: the first device with an active port
  int gid_index = -1;        // -1: RpcConfig's automatic choice
  rpc::VerbsBulk verbs_bulk = rpc::VerbsBulk::kAuto;
  bool udp_offload = true;                 // RpcConfig::udp_offload
  std::string fabric_provider;             // empty: libfabric's first RDM provider
  uint32_t sm_timeout_ms = 0;              // 0: NexusConfig's default
  uint32_t failure_timeout_ms = 0;         // 0: NexusConfig's default
  std::size_t bulk_threshold_bytes = 0;    // 0: RpcConfig's default
  std::size_t session_credits = 0;         // 0: RpcConfig's default
  std::optional<bool> congestion_control;  // unset: RpcConfig's default
  double cc_link_gbps = 0;                 // 0: RpcConfig's default
  uint32_t cc_t_low_us = 0;                // 0: RpcConfig's default
  uint32_t cc_t_high_us = 0;               // 0: RpcConfig's default
};

// "--mtu" as printed: the number, or "auto" for the transport's own (0).
std::string mtu_name(std::size_t mtu);

// A CLI11 app with this project's conventions: a repeated option keeps its
// last value (as scripts that append overrides expect), and defaults are
// shown in --help.
void configure_app(CLI::App& app);

// Adds --mode, --server-uri, --client-uri, --transport, --mtu, --verbs-device,
// --gid-index, --udp-offload, --verbs-bulk, --fabric-provider,
// --sm-timeout-ms, --failure-timeout-ms, --bulk-threshold, --credits, --cc,
// --cc-link-gbps, --cc-t-low-us and --cc-t-high-us, in a group of their own.
void add_endpoint_options(CLI::App& app, EndpointOptions& ep);

// Whether any option of `group` (an option group, or the app) was given.
bool any_given(const CLI::App& group);

// Cross-checks once the command line is parsed. `client_flags` names the
// client options (for the error message) and `client_flag_given` says
// whether one was used, which server mode forbids. Throws UsageError.
void check_endpoint_options(const EndpointOptions& ep, bool client_flag_given,
                            std::string_view client_flags);

}  // namespace bench
