// JSON result files.
#include "common/json.h"

#include <fmt/core.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "common/args.h"

namespace bench {

std::string json_escape(std::string_view in) {
  std::string out;
  for (const char c : in) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
    } else {
      out += c;
    }
  }
  return out;
}

namespace {

std::string json_double(double value, int decimals) {
  // JSON has no NaN or infinity.
  if (!std::isfinite(value)) return "null";
  return fmt::format("{:.{}f}", value, decimals);
}

}  // namespace

void JsonObject::add_key(std::string_view key) {
  if (!body_.empty()) body_ += ',';
  body_ += fmt::format("\"{}\":", json_escape(key));
}

JsonObject& JsonObject::add_string(std::string_view key, std::string_view value) {
  add_key(key);
  body_ += fmt::format("\"{}\"", json_escape(value));
  return *this;
}

JsonObject& JsonObject::add_uint(std::string_view key, std::uint64_t value) {
  add_key(key);
  body_ += fmt::format("{}", value);
  return *this;
}

JsonObject& JsonObject::add_double(std::string_view key, double value, int decimals) {
  add_key(key);
  body_ += json_double(value, decimals);
  return *this;
}

JsonObject& JsonObject::add_raw(std::string_view key, std::string_view json) {
  add_key(key);
  body_ += json;
  return *this;
}

std::string json_double_array(const std::vector<double>& values, int decimals) {
  std::string out = "[";
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i != 0) out += ',';
    out += json_double(values[i], decimals);
  }
  return out + "]";
}

std::string json_uint_array(const std::vector<std::uint64_t>& values) {
  std::string out = "[";
  for (std::size_t i = 0; i < values.size(); ++i) {
    out += fmt::format("{}{}", i != 0 ? "," : "", values[i]);
  }
  return out + "]";
}

JsonObject& JsonObject::append(const JsonObject& other) {
  if (!body_.empty() && !other.body_.empty()) body_ += ',';
  body_ += other.body_;
  return *this;
}

void write_report(const std::string& path, const Report& report) {
  std::string results = "[";
  for (std::size_t i = 0; i < report.results.size(); ++i) {
    if (i != 0) results += ',';
    results += report.results[i].str();
  }
  results += ']';
  JsonObject top;
  top.add_string("system", "librpc")
      .add_string("transport", report.transport)
      .add_string("workload", report.workload)
      .add_string("setup", report.setup)
      .append(report.extra)
      .add_raw("results", results);
  const std::string out = top.str() + "\n";

  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) throw RunError(fmt::format("cannot open {}: {}", path, std::strerror(errno)));
  const bool write_failed = std::fwrite(out.data(), 1, out.size(), f) != out.size();
  if (std::fclose(f) != 0 || write_failed) {
    throw RunError(fmt::format("writing {}: {}", path, std::strerror(errno)));
  }
}

}  // namespace bench
