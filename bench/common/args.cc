// Command-line helpers shared by the benchmarks.
#include "common/args.h"

#include <fmt/core.h>

#include <algorithm>
#include <charconv>
#include <cmath>

namespace bench {

std::uint64_t parse_unsigned(std::string_view flag, std::string_view text, std::uint64_t min,
                             std::uint64_t max) {
  std::uint64_t value = 0;
  const char* last = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), last, value);
  if (text.empty() || ec == std::errc::invalid_argument || ptr != last) {
    throw UsageError(fmt::format("{}: '{}' is not a non-negative integer", flag, text));
  }
  if (ec == std::errc::result_out_of_range || value < min || value > max) {
    throw UsageError(fmt::format("{}: {} is out of range [{}, {}]", flag, text, min, max));
  }
  return value;
}

double parse_positive_double(std::string_view flag, std::string_view text) {
  double value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size() || !(value > 0) ||
      !std::isfinite(value)) {
    throw UsageError(fmt::format("{}: '{}' is not a positive number", flag, text));
  }
  return value;
}

std::size_t parse_size(std::string_view flag, std::string_view text, std::size_t max) {
  std::size_t shift = 0;
  std::string_view digits = text;
  for (const auto& [suffix, bits] : {std::pair{"KiB", 10}, std::pair{"MiB", 20}, std::pair{"K", 10},
                                     std::pair{"M", 20}, std::pair{"k", 10}}) {
    if (digits.ends_with(suffix)) {
      digits.remove_suffix(std::string_view(suffix).size());
      shift = static_cast<std::size_t>(bits);
      break;
    }
  }
  // Range-check the digits first so that the shift cannot overflow.
  const std::uint64_t n = parse_unsigned(flag, digits, 0, max);
  if (n > (max >> shift)) {
    throw UsageError(fmt::format("{}: {} is more than the maximum of {} B", flag, text, max));
  }
  return static_cast<std::size_t>(n << shift);
}

std::vector<std::size_t> parse_sizes(std::string_view flag, std::string_view text,
                                     std::size_t max) {
  std::vector<std::size_t> sizes;
  std::size_t pos = 0;
  for (;;) {
    const auto comma = text.find(',', pos);
    const auto item = text.substr(pos, comma == std::string_view::npos ? text.npos : comma - pos);
    sizes.push_back(parse_size(flag, item, max));
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  return sizes;
}

void check_uri(std::string_view flag, std::string_view text, bool allow_port_zero) {
  const auto colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 == text.size()) {
    throw UsageError(fmt::format("{}: '{}' is not of the form HOST:PORT", flag, text));
  }
  parse_unsigned(flag, text.substr(colon + 1), allow_port_zero ? 0 : 1, 65535);
}

std::string parse_path(std::string_view flag, std::string_view text) {
  if (text.empty()) throw UsageError(fmt::format("{}: empty file name", flag));
  return std::string(text);
}

std::string format_size(std::size_t bytes) {
  if (bytes >= (1u << 20) && bytes % (1u << 20) == 0) return fmt::format("{} MiB", bytes >> 20);
  if (bytes >= (1u << 10) && bytes % (1u << 10) == 0) return fmt::format("{} KiB", bytes >> 10);
  return fmt::format("{} B", bytes);
}

std::vector<Flag> split_flags(int argc, char** argv, std::span<const std::string_view> valued,
                              std::span<const std::string_view> switches) {
  const auto contains = [](std::span<const std::string_view> set, std::string_view name) {
    return std::find(set.begin(), set.end(), name) != set.end();
  };
  std::vector<Flag> flags;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      flags.push_back({"--help", {}});
      continue;
    }
    if (!arg.starts_with("--")) throw UsageError(fmt::format("unexpected argument '{}'", arg));
    // Accept both "--flag value" and "--flag=value".
    Flag flag{arg, {}};
    std::optional<std::string_view> inline_value;
    if (const auto eq = arg.find('='); eq != std::string_view::npos) {
      flag.name = arg.substr(0, eq);
      inline_value = arg.substr(eq + 1);
    }
    if (contains(switches, flag.name) && !inline_value) {
      flags.push_back(flag);
      continue;
    }
    if (!contains(valued, flag.name) && !contains(kEndpointFlags, flag.name)) {
      throw UsageError(fmt::format("unknown option '{}'", flag.name));
    }
    if (inline_value) {
      flag.value = *inline_value;
    } else {
      if (i + 1 >= argc) throw UsageError(fmt::format("option '{}' requires a value", flag.name));
      flag.value = argv[++i];
    }
    flags.push_back(flag);
  }
  return flags;
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

bool apply_endpoint_flag(EndpointOptions& ep, const Flag& flag) {
  const std::string_view value = flag.value;
  if (flag.name == "--mode") {
    if (value == "both") {
      ep.mode = Mode::kBoth;
    } else if (value == "server") {
      ep.mode = Mode::kServer;
    } else if (value == "client") {
      ep.mode = Mode::kClient;
    } else {
      throw UsageError(fmt::format("--mode: '{}' is not one of both, server, client", value));
    }
  } else if (flag.name == "--server-uri") {
    ep.server_uri = std::string(value);  // checked once the mode is known
  } else if (flag.name == "--client-uri") {
    check_uri(flag.name, value, /*allow_port_zero=*/true);
    ep.client_uri = std::string(value);
  } else if (flag.name == "--transport") {
    if (value.empty()) throw UsageError("--transport: empty name");
    ep.transport = std::string(value);
  } else if (flag.name == "--mtu") {
    ep.mtu = static_cast<std::size_t>(parse_unsigned(flag.name, value, 0, 65535));
  } else if (flag.name == "--verbs-device") {
    if (value.empty()) throw UsageError("--verbs-device: empty name");
    ep.verbs_device = std::string(value);
  } else if (flag.name == "--gid-index") {
    ep.gid_index =
        value == "auto" ? -1 : static_cast<int>(parse_unsigned(flag.name, value, 0, 65535));
  } else if (flag.name == "--udp-offload") {
    if (value != "on" && value != "off") {
      throw UsageError(fmt::format("--udp-offload: '{}' is not on or off", value));
    }
    ep.udp_offload = value == "on";
  } else if (flag.name == "--verbs-bulk") {
    if (value == "auto") {
      ep.verbs_bulk = rpc::VerbsBulk::kAuto;
    } else if (value == "rc") {
      ep.verbs_bulk = rpc::VerbsBulk::kRc;
    } else if (value == "dc") {
      ep.verbs_bulk = rpc::VerbsBulk::kDc;
    } else if (value == "off") {
      ep.verbs_bulk = rpc::VerbsBulk::kOff;
    } else {
      throw UsageError(fmt::format("--verbs-bulk: '{}' is not one of auto, rc, dc, off", value));
    }
  } else if (flag.name == "--fabric-provider") {
    if (value.empty()) throw UsageError("--fabric-provider: empty name");
    ep.fabric_provider = std::string(value);
  } else if (flag.name == "--sm-timeout-ms") {
    ep.sm_timeout_ms = static_cast<uint32_t>(parse_unsigned(flag.name, value, 1, 3600000));
  } else if (flag.name == "--failure-timeout-ms") {
    ep.failure_timeout_ms = static_cast<uint32_t>(parse_unsigned(flag.name, value, 1, 3600000));
  } else if (flag.name == "--bulk-threshold") {
    ep.bulk_threshold_bytes =
        static_cast<std::size_t>(parse_unsigned(flag.name, value, 1, uint64_t{1} << 40));
  } else if (flag.name == "--credits") {
    ep.session_credits = static_cast<std::size_t>(parse_unsigned(flag.name, value, 8, 65535));
  } else if (flag.name == "--cc") {
    if (value != "on" && value != "off") {
      throw UsageError(fmt::format("--cc: '{}' is not on or off", value));
    }
    ep.congestion_control = value == "on";
  } else if (flag.name == "--cc-link-gbps") {
    ep.cc_link_gbps = parse_positive_double(flag.name, value);
  } else if (flag.name == "--cc-t-low-us") {
    ep.cc_t_low_us = static_cast<uint32_t>(parse_unsigned(flag.name, value, 1, 1'000'000));
  } else if (flag.name == "--cc-t-high-us") {
    ep.cc_t_high_us = static_cast<uint32_t>(parse_unsigned(flag.name, value, 1, 1'000'000));
  } else {
    return false;
  }
  return true;
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

std::string mtu_name(std::size_t mtu) { return mtu == 0 ? "auto" : fmt::format("{}", mtu); }

std::string endpoint_usage() {
  return fmt::format(
      "  --server-uri H:P     server Nexus URI (required for server/client mode;\n"
      "                       both mode default 127.0.0.1:0)\n"
      "  --client-uri H:P     client Nexus URI (client mode; default: the local address\n"
      "                       that routes to the server, port 0)\n"
      "  --transport NAME     RpcConfig.transport (default udp)\n"
      "  --mtu BYTES          RpcConfig.mtu_bytes (default 0: the transport's own packet\n"
      "                       size, udp 1500, fabric shm 4096); must match the server's\n"
      "  --verbs-device NAME  verbs: the RDMA device (default: first with an active port)\n"
      "  --gid-index N|auto   verbs: the GID index to address the port by (default auto:\n"
      "                       the RoCEv2 GID of the Nexus's IP, else one with an address)\n"
      "  --udp-offload on|off udp: UDP GSO sends and GRO receives where the kernel has\n"
      "                       them (default on)\n"
      "  --verbs-bulk MODE    verbs: auto (DC on mlx5 NICs, else RC), rc, dc, off\n"
      "                       (large messages as datagrams); default auto\n"
      "  --fabric-provider P  fabric: the libfabric provider (efa, tcp;ofi_rxm, shm;\n"
      "                       default: the first with RDM endpoints)\n"
      "  --sm-timeout-ms N    NexusConfig.sm_timeout_ms: connect timeout (default 1000)\n"
      "  --failure-timeout-ms N\n"
      "                       NexusConfig.failure_timeout_ms: a silent peer is declared\n"
      "                       failed after this long (default 1000); raise it where a\n"
      "                       busy-polling peer may not get a CPU for a while\n"
      "  --bulk-threshold BYTES\n"
      "                       RpcConfig.bulk_threshold_bytes: larger messages go by\n"
      "                       one-sided read where the transport has it (default 16384;\n"
      "                       a huge value keeps every message on datagrams)\n"
      "  --credits N          RpcConfig.session_credits: packets in flight per session\n"
      "                       (default {}; a session gets the smaller of both ends')\n"
      "  --cc on|off          RpcConfig.congestion_control: Timely rate control and\n"
      "                       pacing of a client's sessions (default {})\n"
      "  --cc-link-gbps X     RpcConfig.cc_link_gbps: the full rate (default {})\n"
      "  --cc-t-low-us N, --cc-t-high-us N\n"
      "                       RpcConfig.cc_t_low_us, cc_t_high_us: Timely's thresholds\n"
      "                       above a session's base RTT (default {}, {})\n",
      rpc::RpcConfig{}.session_credits, rpc::RpcConfig{}.congestion_control ? "on" : "off",
      rpc::RpcConfig{}.cc_link_gbps, rpc::RpcConfig{}.cc_t_low_us, rpc::RpcConfig{}.cc_t_high_us);
}

}  // namespace bench
