#include "cli.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <stdexcept>
#include <string_view>

#include <fmt/format.h>

namespace measure {
namespace {

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

std::uint64_t parse_size(std::string_view text, std::uint64_t max) {
  std::uint64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr == text.data()) {
    throw std::invalid_argument(fmt::format("'{}' is not a size (4096, 4K, 1MiB, 1G)", text));
  }
  const std::string suffix = lower(std::string_view(ptr, static_cast<std::size_t>(end - ptr)));
  int shift = 0;
  if (suffix == "" || suffix == "b") {
    shift = 0;
  } else if (suffix == "k" || suffix == "kib") {
    shift = 10;
  } else if (suffix == "m" || suffix == "mib") {
    shift = 20;
  } else if (suffix == "g" || suffix == "gib") {
    shift = 30;
  } else {
    throw std::invalid_argument(
        fmt::format("'{}': unknown size suffix (K, KiB, M, MiB, G, GiB)", text));
  }
  if (value > (max >> shift)) {
    throw std::invalid_argument(fmt::format("'{}' is larger than {}", text, max));
  }
  return value << shift;
}

std::string format_size(std::uint64_t bytes) {
  if (bytes >= (1u << 30) && bytes % (1u << 30) == 0) return fmt::format("{} GiB", bytes >> 30);
  if (bytes >= (1u << 20) && bytes % (1u << 20) == 0) return fmt::format("{} MiB", bytes >> 20);
  if (bytes >= (1u << 10) && bytes % (1u << 10) == 0) return fmt::format("{} KiB", bytes >> 10);
  return fmt::format("{} B", bytes);
}

CLI::Validator size_transformer(std::uint64_t min, std::uint64_t max) {
  return CLI::Validator(
      [min, max](std::string& text) -> std::string {
        try {
          const std::uint64_t value = parse_size(text, max);
          if (value < min) return fmt::format("'{}' is smaller than {}", text, min);
          text = std::to_string(value);
          return "";
        } catch (const std::invalid_argument& e) {
          return e.what();
        }
      },
      "", "size");
}

CLI::Validator positive_double() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        double value = 0;
        const char* end = text.data() + text.size();
        const auto [ptr, ec] = std::from_chars(text.data(), end, value);
        if (ec != std::errc() || ptr != end || !std::isfinite(value) || value <= 0) {
          return fmt::format("'{}' is not a number > 0", text);
        }
        return "";
      },
      "", "positive");
}

CLI::Option* add_size_option(CLI::App& app, const std::string& name, std::size_t& var,
                             const std::string& description, std::uint64_t min, std::uint64_t max) {
  return app.add_option(name, var, description)
      ->transform(size_transformer(min, max))
      ->type_name("SIZE");
}

CLI::Option* add_sizes_option(CLI::App& app, const std::string& name, std::vector<std::size_t>& var,
                              const std::string& description, std::uint64_t min,
                              std::uint64_t max) {
  return app.add_option(name, var, description)
      ->delimiter(',')
      ->transform(size_transformer(min, max))
      ->type_name("SIZE,...");
}

namespace {

// Checks a decimal integer (a '-' only where `is_signed`) and strips its
// leading zeros, so that CLI11's base-0 conversion reads it as decimal.
CLI::Validator decimal_integer(bool is_signed) {
  return CLI::Validator(
      [is_signed](std::string& text) -> std::string {
        std::size_t start = 0;
        if (is_signed && !text.empty() && text[0] == '-') start = 1;
        if (start == text.size()) return "not a decimal integer: '" + text + "'";
        for (std::size_t i = start; i < text.size(); ++i) {
          if (text[i] < '0' || text[i] > '9') return "not a decimal integer: '" + text + "'";
        }
        const std::size_t first_nonzero = text.find_first_not_of('0', start);
        const std::size_t keep_from =
            first_nonzero == std::string::npos ? text.size() - 1 : first_nonzero;
        text.erase(start, keep_from - start);
        return {};
      },
      "", "DECIMAL");
}

}  // namespace

void add_output_options(CLI::App& app, std::string& json_path, std::string& csv_path) {
  const CLI::Validator non_empty(
      [](std::string& v) { return v.empty() ? std::string("empty file name") : std::string(); },
      "");
  app.add_option("--json", json_path, "also write the results as JSON (bench/compare/SCHEMA.md)")
      ->type_name("FILE")
      ->check(non_empty);
  app.add_option("--csv", csv_path, "also write the results as CSV, one row per result")
      ->type_name("FILE")
      ->check(non_empty);
}

void apply_conventions(CLI::App& app) {
  for (CLI::Option* option : app.get_options()) {
    if (option->get_items_expected_max() <= 1 && option->get_type_size() <= 1 &&
        option->get_expected_max() <= 1) {
      option->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    }
    // The type name, before the ":" and the checks' descriptions CLI11 adds.
    const std::string full_type = option->get_type_name();
    const std::string type = full_type.substr(0, full_type.find(':'));
    if (type == "UINT" || type == "INT") {
      // First, before the option's own checks see the text.
      option->transform(decimal_integer(type == "INT"));
    }
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) apply_conventions(*sub);
}

std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv) {
  // The usage line and errors name the program as it was run (an installed
  // librpc-latency, not the name it was written under).
  if (argc > 0 && argv[0] != nullptr && argv[0][0] != '\0') {
    const std::string_view invoked = argv[0];
    app.name(std::string(invoked.substr(invoked.rfind('/') + 1)));
  }
  apply_conventions(app);
  try {
    app.parse(argc, argv);
    return std::nullopt;
  } catch (const CLI::CallForHelp& e) {
    app.exit(e);
    return 0;
  } catch (const CLI::CallForAllHelp& e) {
    app.exit(e);
    return 0;
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  }
}

int usage_error(const CLI::App& app, std::string_view message) {
  fmt::print(stderr, "{}: {}\nRun with --help for more information.\n", app.get_name(), message);
  return 2;
}

}  // namespace measure
