#include "scaffold.h"

#include <arpa/inet.h>
#include <fmt/core.h>
#include <sched.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <exception>
#include <thread>
#include <utility>

#include "cli.h"

namespace baseline {

void throw_errno(std::string_view what) {
  throw RunError(fmt::format("{}: {}", what, std::strerror(errno)));
}

namespace {

// The socket address of "IPV4:PORT", or the reason it is not one.
std::string to_endpoint(std::string_view text, sockaddr_in& addr) {
  const auto colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 == text.size()) {
    return fmt::format("'{}' is not of the form IPV4:PORT", text);
  }
  const std::string_view port_text = text.substr(colon + 1);
  unsigned port = 0;
  const auto [ptr, ec] =
      std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc() || ptr != port_text.data() + port_text.size() || port > 65535) {
    return fmt::format("'{}' is not a port number", port_text);
  }
  const std::string host(text.substr(0, colon));
  addr = sockaddr_in{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  if (::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    return fmt::format("'{}' is not an IPv4 address", host);
  }
  return "";
}

}  // namespace

sockaddr_in parse_endpoint(std::string_view flag, std::string_view text) {
  sockaddr_in addr{};
  if (std::string why = to_endpoint(text, addr); !why.empty()) {
    throw UsageError(fmt::format("{}: {}", flag, why));
  }
  return addr;
}

CLI::Validator endpoint_check() {
  return CLI::Validator(
      [](const std::string& text) {
        sockaddr_in addr{};
        return to_endpoint(text, addr);
      },
      "IPV4:PORT", "endpoint");
}

CLI::Validator host_port_check() {
  return CLI::Validator(
      [](const std::string& text) -> std::string {
        const std::size_t colon = text.rfind(':');
        const std::string port = colon == std::string::npos ? "" : text.substr(colon + 1);
        const bool port_ok = !port.empty() && port.size() <= 5 &&
                             port.find_first_not_of("0123456789") == std::string::npos &&
                             std::stoul(port) <= 65535;
        if (colon == 0 || colon == std::string::npos || !port_ok) {
          return "expected HOST:PORT, got '" + text + "'";
        }
        return {};
      },
      "HOST:PORT", "host_port");
}

std::string format_addr(const sockaddr_in& addr) {
  char buf[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &addr.sin_addr, buf, sizeof buf);
  return fmt::format("{}:{}", buf, ntohs(addr.sin_port));
}

bool can_pin_cpus_0_and_1() {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return false;
  return CPU_COUNT(&allowed) >= 2 && CPU_ISSET(0, &allowed) && CPU_ISSET(1, &allowed);
}

bool pin_thread(pthread_t thread, int cpu, std::string_view who) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (const int rc = pthread_setaffinity_np(thread, sizeof set, &set); rc != 0) {
    fmt::print(stderr, "warning: cannot pin {} to CPU {}: {}\n", who, cpu, std::strerror(rc));
    return false;
  }
  return true;
}

sockaddr_in loopback_any_port() {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  return addr;
}

std::string run_both(std::string_view name, const sockaddr_in& server_addr,
                     const std::function<void(const std::atomic<bool>& stop)>& server,
                     const std::function<void()>& client) {
  const bool can_pin = can_pin_cpus_0_and_1();
  std::atomic<bool> stop{false};
  std::exception_ptr server_error;
  std::thread server_thread([&] {
    try {
      server(stop);
    } catch (...) {
      server_error = std::current_exception();
    }
  });
  const bool pinned = can_pin && pin_thread(server_thread.native_handle(), 1, "server thread") &&
                      pin_thread(pthread_self(), 0, "client thread");
  const std::string pinning = pinned
                                  ? "server thread pinned to CPU 1, client pinned to CPU 0"
                                  : fmt::format("NOT pinned ({}); server and client threads float",
                                                can_pin ? "pthread_setaffinity_np failed"
                                                        : "CPUs 0 and 1 not both available");
  fmt::print("{}: combined mode on {}: {}\n", name, format_addr(server_addr), pinning);
  std::fflush(stdout);

  std::exception_ptr client_error;
  try {
    client();
  } catch (...) {
    client_error = std::current_exception();
  }
  stop.store(true, std::memory_order_relaxed);  // in case the server missed the client's stop
  server_thread.join();
  if (server_error) std::rethrow_exception(server_error);
  if (client_error) std::rethrow_exception(client_error);
  return pinning;
}

void add_interval_options(CLI::App& app, double& duration_s, double& warmup_s,
                          const std::string& warmup_flag) {
  constexpr double kMaxSeconds = 3600;
  app.add_option("--duration", duration_s, "measured interval, seconds")
      ->check(CLI::Range(0.0, kMaxSeconds) & measure::positive_double())
      ->capture_default_str();
  app.add_option(warmup_flag, warmup_s, "unmeasured interval before it, seconds")
      ->check(CLI::Range(0.0, kMaxSeconds))
      ->capture_default_str();
}

void add_batch_option(CLI::App& app, std::size_t& batch) {
  app.add_option("--batch", batch, "datagrams per sendmmsg/recvmmsg")
      ->check(CLI::Range(std::size_t{1}, kMaxBatch))
      ->capture_default_str();
}

Program::Program(std::string name, std::string system, const std::string& description, int argc,
                 char** argv)
    : name_(std::move(name)), cli_(description, name_), run_info_(argc, argv) {
  result_.system = std::move(system);
}

void Program::add_output_options(CLI::App& app) {
  measure::add_output_options(app, json_path_, csv_path_);
}

int Program::run(int argc, char** argv, const std::function<int()>& body) {
  if (auto status = measure::parse_command_line(cli_, argc, argv)) return *status;
  try {
    return body();
  } catch (const UsageError& e) {
    return measure::usage_error(cli_, e.what());
  } catch (const std::exception& e) {
    fmt::print(stderr, "{}: error: {}\n", name_, e.what());
    return 1;
  }
}

void Program::start_measurement() { context_switches_.start(); }

void Program::finish_measurement(int busy_cores) {
  context_switches_.stop();
  run_info_.finish();
  busy_cores_ = busy_cores;
}

void Program::check_trust() {
  warn(measure::check_load(run_info_, busy_cores_));
  warn(measure::check_context_switches(context_switches_.count()));
}

void Program::describe(std::string transport, std::string workload, std::string setup,
                       measure::Json config) {
  result_.transport = std::move(transport);
  result_.workload = std::move(workload);
  result_.setup = std::move(setup);
  result_.config = std::move(config);
}

void Program::write_outputs() {
  result_.run = run_info_.to_json();
  result_.warnings = warnings_.list();
  measure::write_outputs(json_path_, csv_path_, result_);
}

Modes::Modes(Program& program, std::string_view default_bind, const Options& options,
             const std::string& both_alias)
    : bind(default_bind) {
  const auto add = [](CLI::App& app, const AddOptions& add_options) {
    if (add_options) add_options(app);
  };
  const auto add_both = [&](CLI::App& app) {
    add(app, options.client);
    add(app, options.server);
    add(app, options.shared);
    add(app, options.both);
    program.add_output_options(app);
  };
  CLI::App& cli = program.cli();
  cli.require_subcommand(0, 1);
  add_both(cli);
  if (!both_alias.empty()) {
    add_both(*cli.add_subcommand(both_alias, "server and client in one process, over 127.0.0.1"));
  }
  server_cmd_ = cli.add_subcommand("server", "the server alone; runs until killed");
  const char* const form = options.any_host ? "HOST:PORT" : "IPV4:PORT";
  const CLI::Validator endpoint = options.any_host ? host_port_check() : endpoint_check();
  server_cmd_->add_option("--bind", bind, fmt::format("the address {} to serve on", form))
      ->check(endpoint)
      ->capture_default_str();
  add(*server_cmd_, options.server);
  add(*server_cmd_, options.shared);
  client_cmd_ = cli.add_subcommand("client", "the client alone, of a server elsewhere");
  client_cmd_->add_option("--server", server_address, fmt::format("the server's address {}", form))
      ->check(endpoint)
      ->required();
  add(*client_cmd_, options.client);
  add(*client_cmd_, options.shared);
  program.add_output_options(*client_cmd_);
  cli.footer("Without server or client: both in one process, over 127.0.0.1.");
}

void print_rtt_header(std::string_view labels) {
  fmt::print("{}\n{} {}\n", measure::kRttNote, labels, measure::rtt_header());
}

measure::Json rtt_row(Program& program, const measure::Histogram& h, std::string_view values,
                      measure::Json fields) {
  if (h.empty()) throw RunError("no round trips completed");
  fmt::print("{} {}\n", values, measure::rtt_row(h));
  program.warn(measure::check_tail_gap(h));
  measure::add_rtt_fields(fields, h);
  return fields;
}

}  // namespace baseline
