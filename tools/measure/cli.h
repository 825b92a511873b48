// CLI11 helpers shared by every benchmark and baseline program: byte sizes
// with binary suffixes, lists of sizes, positive numbers, and the exit
// status convention (2 for a bad command line, 0 for --help).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

namespace measure {

inline constexpr std::uint64_t kNoSizeLimit = UINT64_MAX;

// A byte count, optionally with a binary suffix: 4096, 4K, 4KiB, 1M, 1MiB,
// 1G, 1GiB (case-insensitive; K = 1024). Throws std::invalid_argument.
std::uint64_t parse_size(std::string_view text, std::uint64_t max = kNoSizeLimit);
// "32 B", "4 KiB", "1 MiB": exact binary units when they divide evenly.
std::string format_size(std::uint64_t bytes);

// A transformer that rewrites a size (parse_size) as its decimal value, so
// any integer option accepts suffixes. Applied to each element of a list.
CLI::Validator size_transformer(std::uint64_t min = 0, std::uint64_t max = kNoSizeLimit);
// A check for a finite number > 0.
CLI::Validator positive_double();

// --name SIZE, into var.
CLI::Option* add_size_option(CLI::App& app, const std::string& name, std::size_t& var,
                             const std::string& description, std::uint64_t min = 0,
                             std::uint64_t max = kNoSizeLimit);
// --name SIZE,SIZE,..., into var (replacing its default when given).
CLI::Option* add_sizes_option(CLI::App& app, const std::string& name, std::vector<std::size_t>& var,
                              const std::string& description, std::uint64_t min = 0,
                              std::uint64_t max = kNoSizeLimit);

// --json FILE and --csv FILE (result files, bench/compare/SCHEMA.md); an
// empty name is a usage error.
void add_output_options(CLI::App& app, std::string& json_path, std::string& csv_path);

// app.parse(argc, argv) with this project's exit statuses: nullopt when the
// program should go on; 0 after printing the help (--help, -h); 2 after
// printing a parse error and the hint to run with --help (CLI11's own codes
// differ). Before parsing it names the app after argv[0]'s file name and
// applies the conventions of every program here (apply_conventions).
std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv);

// The command-line conventions the hand-written parsers had, on every option
// of app and its subcommands added so far:
//  - a repeated single-value option takes its last value (scripts append
//    overrides), instead of CLI11's error; list options still collect;
//  - integers are decimal: CLI11 would read "010" as octal and "0x10" as
//    hex, and take "-1" as 2^64-1 for an unsigned option. "010" is 10, and
//    "0x10", "1e3" and a sign on an unsigned option are usage errors.
void apply_conventions(CLI::App& app);

// Prints "program: message" and the --help hint to stderr and returns 2: for
// the cross-checks a program makes after parsing.
int usage_error(const CLI::App& app, std::string_view message);

}  // namespace measure
