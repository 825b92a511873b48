// The JSON result files of bench/compare/SCHEMA.md: a small object builder
// (keys in insertion order, no nesting beyond raw values) and the writer of
// the top-level report.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace bench {

// JSON string body: escapes quotes, backslashes and control characters.
std::string json_escape(std::string_view in);

// One JSON object, built field by field.
class JsonObject {
 public:
  JsonObject& add_string(std::string_view key, std::string_view value);
  JsonObject& add_uint(std::string_view key, std::uint64_t value);
  // Fixed-point with `decimals` digits; non-finite values become null.
  JsonObject& add_double(std::string_view key, double value, int decimals = 3);
  // `json` is inserted as is: an array or object built by the caller.
  JsonObject& add_raw(std::string_view key, std::string_view json);
  // Appends every field of `other`, in its order.
  JsonObject& append(const JsonObject& other);
  std::string str() const { return "{" + body_ + "}"; }

 private:
  void add_key(std::string_view key);
  std::string body_;
};

// "[a,b,...]" with each value fixed-point.
std::string json_double_array(const std::vector<double>& values, int decimals = 3);
std::string json_uint_array(const std::vector<std::uint64_t>& values);

// The top-level object of a result file.
struct Report {
  std::string transport;
  std::string workload;  // "latency", "rate" or "goodput"
  std::string setup;     // where each side ran, pinning, batch size
  JsonObject extra;      // program-specific fields after "setup"
  std::vector<JsonObject> results;
};

// Writes {"system":"librpc","transport":..,"workload":..,"setup":..,
// <extra>, "results":[...]} to path. Throws RunError.
void write_report(const std::string& path, const Report& report);

}  // namespace bench
