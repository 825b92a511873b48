// Command-line helpers shared by the benchmarks: the two error kinds that map
// to exit codes, number and size parsers, a flag splitter, and the endpoint
// options every benchmark takes (--mode, --server-uri, --client-uri,
// --transport, --mtu).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "librpc/config.h"

namespace bench {

// Bad command line: reported with the usage text, exit status 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Operational failure: exit status 1.
struct RunError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

inline constexpr std::size_t kDefaultMtu = 0;  // RpcConfig's: the transport's own

// A decimal integer in [min, max]. Throws UsageError naming `flag`.
std::uint64_t parse_unsigned(std::string_view flag, std::string_view text, std::uint64_t min,
                             std::uint64_t max);
// A finite number > 0. Throws UsageError naming `flag`.
double parse_positive_double(std::string_view flag, std::string_view text);
// A byte count, optionally with a binary suffix: 4096, 4K, 4KiB, 1M, 1MiB.
std::size_t parse_size(std::string_view flag, std::string_view text, std::size_t max);
// A comma-separated list of parse_size() values.
std::vector<std::size_t> parse_sizes(std::string_view flag, std::string_view text, std::size_t max);
// "host:port" with a non-empty host and a numeric port (0 allowed where a
// Nexus binds; resolution is left to librpc).
void check_uri(std::string_view flag, std::string_view text, bool allow_port_zero);
// A file name for --json and the like: anything but empty.
std::string parse_path(std::string_view flag, std::string_view text);
// "32 B", "4 KiB", "1 MiB": exact binary units when they divide evenly.
std::string format_size(std::size_t bytes);

// One command-line flag: "--name value", "--name=value", or a switch
// (value empty). "-h" is reported as "--help".
struct Flag {
  std::string_view name;
  std::string_view value;
};

// Splits argv[1..argc) into flags. Flags in `valued` and the endpoint
// flags (kEndpointFlags, below) take a value; those in `switches` do not;
// "--help"/"-h" is always a switch. Throws UsageError on
// a word that is not a known flag or a missing value.
std::vector<Flag> split_flags(int argc, char** argv, std::span<const std::string_view> valued,
                              std::span<const std::string_view> switches);

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

// The flags apply_endpoint_flag() understands, for split_flags().
inline constexpr std::string_view kEndpointFlags[] = {"--mode",
                                                      "--server-uri",
                                                      "--client-uri",
                                                      "--transport",
                                                      "--mtu",
                                                      "--verbs-device",
                                                      "--gid-index",
                                                      "--fabric-provider",
                                                      "--sm-timeout-ms",
                                                      "--failure-timeout-ms",
                                                      "--bulk-threshold",
                                                      "--verbs-bulk",
                                                      "--udp-offload",
                                                      "--credits",
                                                      "--cc",
                                                      "--cc-link-gbps",
                                                      "--cc-t-low-us",
                                                      "--cc-t-high-us"};

// Applies one of kEndpointFlags; returns false for any other flag.
bool apply_endpoint_flag(EndpointOptions& ep, const Flag& flag);

// Cross-checks once every flag is applied. `client_flags` names the client
// options (for the error message) and `client_flag_given` says whether one
// was used, which server mode forbids.
void check_endpoint_options(const EndpointOptions& ep, bool client_flag_given,
                            std::string_view client_flags);

// Usage lines for the endpoint flags.
std::string endpoint_usage();

}  // namespace bench
