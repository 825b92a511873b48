#include "output.h"

#include <cmath>
#include <fstream>
#include <stdexcept>

#include <fmt/format.h>

namespace measure {
namespace {

std::ofstream open_for_writing(const std::string& path) {
  std::ofstream out(path, std::ios::trunc);
  if (!out) throw std::runtime_error(fmt::format("cannot write {}", path));
  return out;
}

void close_checked(std::ofstream& out, const std::string& path) {
  out.close();
  if (!out) throw std::runtime_error(fmt::format("error writing {}", path));
}

// One CSV cell (RFC 4180: quoted when it holds a comma, quote or newline).
std::string csv_cell(const Json& value) {
  // null, and non-finite numbers (which JSON writes as null): an empty cell.
  if (value.is_null()) return "";
  if (value.is_number_float() && !std::isfinite(value.get<double>())) return "";
  std::string text = value.is_string() ? value.get<std::string>() : value.dump();
  if (text.find_first_of(",\"\n\r") == std::string::npos) return text;
  std::string quoted = "\"";
  for (char c : text) {
    if (c == '"') quoted += '"';
    quoted += c;
  }
  return quoted + "\"";
}

void write_csv_row(std::ofstream& out, const std::vector<std::string>& cells) {
  for (std::size_t i = 0; i < cells.size(); ++i) out << (i ? "," : "") << cells[i];
  out << "\n";
}

}  // namespace

double round_to(double x, int decimals) {
  if (!std::isfinite(x)) return x;
  const double scale = std::pow(10.0, decimals);
  return std::round(x * scale) / scale;
}

void add_rtt_fields(Json& result, const Histogram& h, bool with_cdf, std::string_view prefix) {
  const auto field = [&](std::string_view name) { return fmt::format("{}_{}", prefix, name); };
  static constexpr std::pair<const char*, double> kPercentiles[] = {
      {"p50_us", 50}, {"p90_us", 90}, {"p99_us", 99}, {"p999_us", 99.9}, {"p9999_us", 99.99}};
  for (const auto& [name, p] : kPercentiles) result[field(name)] = round_to(h.percentile_us(p));
  result[field("min_us")] = round_to(static_cast<double>(h.min_ns()) / 1e3);
  result[field("max_us")] = round_to(static_cast<double>(h.max_ns()) / 1e3);
  result[field("mean_us")] = round_to(h.mean_ns() / 1e3);
  if (!with_cdf) return;
  Json cdf = Json::array();
  for (const auto& [value_us, quantile] : h.cdf_us()) {
    cdf.push_back(Json::array({round_to(value_us), round_to(quantile, 6)}));
  }
  result[field("cdf")] = std::move(cdf);
}

std::string rtt_header() {
  return fmt::format("{:>10} {:>10} {:>10} {:>10} {:>10} {:>10}", "rtt p50", "rtt p90", "rtt p99",
                     "rtt p99.9", "rtt p99.99", "rtt max");
}

std::string rtt_row(const Histogram& h) {
  return fmt::format("{:10.2f} {:10.2f} {:10.2f} {:10.2f} {:10.2f} {:10.2f}", h.percentile_us(50),
                     h.percentile_us(90), h.percentile_us(99), h.percentile_us(99.9),
                     h.percentile_us(99.99), static_cast<double>(h.max_ns()) / 1e3);
}

Json to_json(const ResultFile& file) {
  Json j;
  j["schema_version"] = kSchemaVersion;
  j["system"] = file.system;
  j["transport"] = file.transport;
  j["workload"] = file.workload;
  j["setup"] = file.setup;
  Json run = file.run.is_object() ? file.run : Json::object();
  run.erase("schema_version");
  j["run"] = std::move(run);
  j["config"] = file.config;
  j["warnings"] = file.warnings;
  j["results"] = file.results;
  return j;
}

void write_json(const std::string& path, const ResultFile& file) {
  auto out = open_for_writing(path);
  // Invalid UTF-8 (a command line, a host name) is replaced, not thrown on
  // after the measurement is done.
  out << to_json(file).dump(2, ' ', false, Json::error_handler_t::replace) << "\n";
  close_checked(out, path);
}

void write_csv(const std::string& path, const ResultFile& file) {
  std::vector<std::string> columns;
  for (const auto& result : file.results) {
    for (const auto& [key, value] : result.items()) {
      if (value.is_structured()) continue;
      if (std::find(columns.begin(), columns.end(), key) == columns.end()) columns.push_back(key);
    }
  }
  const std::string git_rev = file.run.is_object() && file.run.contains("git_rev")
                                  ? file.run["git_rev"].get<std::string>()
                                  : "unknown";
  auto out = open_for_writing(path);
  std::vector<std::string> header = {"system", "transport", "workload", "git_rev"};
  header.insert(header.end(), columns.begin(), columns.end());
  write_csv_row(out, header);
  for (const auto& result : file.results) {
    std::vector<std::string> row = {csv_cell(file.system), csv_cell(file.transport),
                                    csv_cell(file.workload), csv_cell(git_rev)};
    for (const auto& column : columns) {
      row.push_back(result.contains(column) ? csv_cell(result[column]) : "");
    }
    write_csv_row(out, row);
  }
  close_checked(out, path);
}

void write_outputs(const std::string& json_path, const std::string& csv_path,
                   const ResultFile& file) {
  if (!json_path.empty()) write_json(json_path, file);
  if (!csv_path.empty()) write_csv(csv_path, file);
}

}  // namespace measure
