// The scaffold every baseline program shares (the raw UDP baselines here and
// bench/peers/grpc_echo): the command line (CLI11, with --json and --csv),
// exit statuses, run metadata and trust warnings, result files in the
// schema of bench/compare/SCHEMA.md (tools/measure), round-trip latency
// tables, IPv4 endpoints and thread pinning. It does not depend on librpc.
#pragma once

#include <netinet/in.h>
#include <pthread.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "histogram.h"
#include "output.h"
#include "run_info.h"
#include "trust.h"

namespace baseline {

using Clock = std::chrono::steady_clock;

// A bad command line found after parsing: exit status 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// An operational failure (socket error, unresponsive server): exit status 1.
struct RunError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Throws RunError "what: strerror(errno)".
[[noreturn]] void throw_errno(std::string_view what);

// "IPV4:PORT" as a socket address. Throws UsageError naming flag.
sockaddr_in parse_endpoint(std::string_view flag, std::string_view text);
// A CLI11 check that a value is "IPV4:PORT".
CLI::Validator endpoint_check();
// HOST:PORT with a non-empty host (a name, an IPv4 address or [IPv6]) and a
// port in 0..65535.
CLI::Validator host_port_check();
// "IPV4:PORT".
std::string format_addr(const sockaddr_in& addr);

// Whether CPUs 0 and 1 are both in this process's affinity mask (combined
// modes pin the client to CPU 0 and the server to CPU 1).
bool can_pin_cpus_0_and_1();
// Pins thread to cpu; on failure prints a warning naming `who` and returns
// false.
bool pin_thread(pthread_t thread, int cpu, std::string_view who);

// 127.0.0.1, port 0: a combined mode's server address (an ephemeral port
// never collides with a running server).
sockaddr_in loopback_any_port();

// A combined mode: runs server(stop) on a new thread pinned to CPU 1 and
// client() on this thread pinned to CPU 0 (when both CPUs are ours), prints
// "name: combined mode on ADDR: <pinning>", then sets stop, joins the
// server and rethrows the server's or else the client's exception. The
// client should make the server return (stop only backs that up). Returns
// the pinning, for the result's setup.
std::string run_both(std::string_view name, const sockaddr_in& server_addr,
                     const std::function<void(const std::atomic<bool>& stop)>& server,
                     const std::function<void()>& client);

// --duration SECONDS (measured interval, > 0) and warmup_flag SECONDS (the
// unmeasured interval before it, >= 0), both at most an hour, into
// duration_s and warmup_s.
void add_interval_options(CLI::App& app, double& duration_s, double& warmup_s,
                          const std::string& warmup_flag = "--warmup-seconds");

// --batch N: datagrams per sendmmsg/recvmmsg, 1 to 1024 (UIO_MAXIOV, the
// kernel's cap on vlen).
inline constexpr std::size_t kMaxBatch = 1024;
void add_batch_option(CLI::App& app, std::size_t& batch);

// One baseline program: its command line, its run metadata (sampled at
// construction, so construct it first thing in main), its trust warnings
// and its result file.
class Program {
 public:
  // name: the program's name in messages; system: the result file's
  // "system"; description: the first line of --help.
  Program(std::string name, std::string system, const std::string& description, int argc,
          char** argv);

  CLI::App& cli() { return cli_; }
  const std::string& name() const { return name_; }

  // Adds --json FILE and --csv FILE to app (the program's or a subcommand's).
  void add_output_options(CLI::App& app);

  // Parses the command line, then runs body. Returns the exit status: 0
  // after --help, 2 on a bad command line (or a UsageError from body), 1
  // when body throws anything else (printed as "name: error: ..."), else
  // body's status.
  int run(int argc, char** argv, const std::function<int()>& body);

  // Around the measured part of a run, which busy-polls busy_cores cores:
  // counts involuntary context switches and samples the load average at the
  // end.
  void start_measurement();
  void finish_measurement(int busy_cores);
  // Prints and records the warnings about the measured part (machine busy,
  // descheduled); call it after printing the numbers.
  void check_trust();
  // Runs measure() between start_measurement() and
  // finish_measurement(busy_cores); returns what it returns.
  template <typename Measure>
  auto measured(int busy_cores, Measure&& measure) {
    start_measurement();
    auto result = measure();
    finish_measurement(busy_cores);
    return result;
  }
  // Prints "  warning: w" and records it, when w is set and new.
  void warn(const std::optional<std::string>& w) { warnings_.add_and_print(w); }

  // Names what the result file describes.
  void describe(std::string transport, std::string workload, std::string setup,
                measure::Json config);
  // The result file; add to its results.
  measure::ResultFile& result() { return result_; }
  // Writes the result file to the paths of --json and --csv, if given,
  // with the run metadata and the warnings.
  void write_outputs();

 private:
  std::string name_;
  CLI::App cli_;
  measure::RunInfo run_info_;
  measure::ContextSwitches context_switches_;
  int busy_cores_ = 0;
  measure::Warnings warnings_;
  measure::ResultFile result_;
  std::string json_path_;
  std::string csv_path_;
};

// The modes of every baseline: a `server` subcommand (--bind), a `client`
// subcommand (--server, required) and, when neither is named, both in one
// process over 127.0.0.1.
struct Modes {
  using AddOptions = std::function<void(CLI::App&)>;
  // Each adds its options to the app it is given; an empty one adds none.
  struct Options {
    AddOptions client;  // the client's: on `client` and on the program (both)
    AddOptions server;  // the server's: on `server` and on the program
    AddOptions shared;  // both sides': on all three
    AddOptions both;    // the combined mode's own: on the program (and both_alias)
    // --bind and --server: IPV4:PORT (the UDP programs' sockets), or any
    // HOST:PORT the program resolves itself (a host name, [IPv6]:PORT).
    bool any_host = false;
  };
  // --json and --csv go with the client's options. both_alias: a subcommand
  // name that means "both in one process" as well ("" for none).
  Modes(Program& program, std::string_view default_bind, const Options& options,
        const std::string& both_alias = "");

  bool server() const { return server_cmd_->parsed(); }
  bool client() const { return client_cmd_->parsed(); }
  bool both() const { return !server() && !client(); }

  std::string bind;            // server: the address to bind
  std::string server_address;  // client: the server's address

 private:
  CLI::App* server_cmd_ = nullptr;
  CLI::App* client_cmd_ = nullptr;
};

// A latency table: print_rtt_header() prints the note that these are round
// trips and the header, the columns `labels` (already formatted, e.g.
// "size iters") followed by "rtt p50 ... rtt max"; rtt_row() prints one row,
// `values` and the histogram's, warns of a tail gap and returns the result
// object: `fields` and the rtt_* fields (with rtt_cdf). Throws RunError on
// an empty histogram.
void print_rtt_header(std::string_view labels);
measure::Json rtt_row(Program& program, const measure::Histogram& h, std::string_view values,
                      measure::Json fields);

}  // namespace baseline
