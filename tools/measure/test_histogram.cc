// Histogram percentiles against the exact percentiles of the sorted sample,
// result files, and the size parser.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>
#include <vector>

#include <catch2/catch.hpp>

#include "cli.h"
#include "histogram.h"
#include "output.h"
#include "run_info.h"
#include "trust.h"

namespace {

using measure::Histogram;

// Nearest-rank percentile of a sorted sample, in exact integer arithmetic:
// p is given in thousandths of a percent (every p the tests use is one).
std::uint64_t exact_percentile(const std::vector<std::uint64_t>& sorted, double p) {
  const auto p_milli = static_cast<std::uint64_t>(std::llround(p * 1000));
  if (p_milli >= 100'000) return sorted.back();
  std::uint64_t rank = (p_milli * sorted.size() + 99'999) / 100'000;
  rank = std::max<std::uint64_t>(rank, 1);
  return sorted[rank - 1];
}

void check_percentiles(std::vector<std::uint64_t> samples) {
  Histogram h;
  for (auto v : samples) h.record(v);
  std::sort(samples.begin(), samples.end());
  for (double p : {0.0, 1.0, 10.0, 50.0, 90.0, 99.0, 99.9, 99.99, 99.999, 100.0}) {
    const double exact = static_cast<double>(exact_percentile(samples, p));
    const double got = static_cast<double>(h.percentile_ns(p));
    INFO("p" << p << " exact " << exact << " got " << got);
    CHECK(std::abs(got - exact) <= exact * Histogram::kRelativeError);
    CHECK(std::abs(got - exact) <= exact * 0.01);
  }
  CHECK(h.count() == samples.size());
  CHECK(h.min_ns() == samples.front());
  CHECK(h.max_ns() == samples.back());
}

}  // namespace

TEST_CASE("values below 256 ns are counted exactly") {
  Histogram h;
  for (std::uint64_t v = 0; v < 256; ++v) h.record(v);
  CHECK(h.percentile_ns(50) == 127);
  CHECK(h.percentile_ns(100) == 255);
  CHECK(h.percentile_ns(0) == 0);
  CHECK(h.mean_ns() == Approx(127.5));
}

TEST_CASE("bucket bounds tile the range without gaps") {
  for (std::size_t b = 0; b + 1 < Histogram::kBuckets; ++b) {
    REQUIRE(Histogram::bucket_low(b) + Histogram::bucket_width(b) == Histogram::bucket_low(b + 1));
    REQUIRE(Histogram::bucket_of(Histogram::bucket_low(b)) == b);
    REQUIRE(Histogram::bucket_of(Histogram::bucket_low(b + 1) - 1) == b);
  }
  // 100 s has a bucket of its own; far larger values go to the last one.
  CHECK(Histogram::bucket_of(100'000'000'000ull) < Histogram::kBuckets - 1);
  CHECK(Histogram::bucket_of(UINT64_MAX) == Histogram::kBuckets - 1);
}

TEST_CASE("percentiles of a uniform sample are within the error bound") {
  std::mt19937_64 rng(1);
  std::uniform_int_distribution<std::uint64_t> dist(1'000, 50'000);
  std::vector<std::uint64_t> samples(200'000);
  for (auto& v : samples) v = dist(rng);
  check_percentiles(samples);
}

TEST_CASE("p99.9 and p99.99 of a heavy-tailed sample are within the error bound") {
  // Round trips of about 5 us with a Pareto tail reaching seconds.
  std::mt19937_64 rng(2);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<std::uint64_t> samples(1'000'000);
  for (auto& v : samples) {
    const double pareto = 5'000.0 / std::pow(1.0 - u(rng), 1.0 / 1.1);
    v = static_cast<std::uint64_t>(std::min(pareto, 100e9));
  }
  check_percentiles(samples);
}

TEST_CASE("a lone outlier is the exact max, not the p99.99") {
  Histogram h;
  for (int i = 0; i < 100'000; ++i) h.record(10'000);
  h.record(90'000'000'000ull);  // 90 s
  CHECK(h.max_ns() == 90'000'000'000ull);
  CHECK(h.percentile_ns(99.99) == Approx(10'000).epsilon(Histogram::kRelativeError));
  CHECK(h.percentile_ns(100) == 90'000'000'000ull);
}

TEST_CASE("merging two histograms equals recording into one") {
  Histogram a, b, both;
  std::mt19937_64 rng(3);
  std::exponential_distribution<double> dist(1.0 / 20'000);
  for (int i = 0; i < 50'000; ++i) {
    const auto v = static_cast<std::uint64_t>(dist(rng)) + 1;
    (i % 3 ? a : b).record(v);
    both.record(v);
  }
  a.merge(b);
  CHECK(a.count() == both.count());
  CHECK(a.min_ns() == both.min_ns());
  CHECK(a.max_ns() == both.max_ns());
  CHECK(a.mean_ns() == Approx(both.mean_ns()));
  for (double p : {50.0, 99.0, 99.99}) CHECK(a.percentile_ns(p) == both.percentile_ns(p));
}

TEST_CASE("the CDF rises to 1 at the max and resolves p99.99") {
  Histogram h;
  for (std::uint64_t i = 1; i <= 100'000; ++i) h.record(i * 10);
  const auto cdf = h.cdf_us();
  REQUIRE(!cdf.empty());
  CHECK(cdf.back().second == 1.0);
  CHECK(cdf.back().first == Approx(1000.0));
  for (std::size_t i = 1; i < cdf.size(); ++i) {
    REQUIRE(cdf[i].first > cdf[i - 1].first);
    REQUIRE(cdf[i].second > cdf[i - 1].second);
  }
  // A point between p99.9 and p99.99: the plot shows the 1e-4 tail.
  CHECK(std::any_of(cdf.begin(), cdf.end(),
                    [](const auto& pt) { return pt.second > 0.999 && pt.second < 0.9999; }));
}

TEST_CASE("an empty histogram reports zeros") {
  Histogram h;
  CHECK(h.percentile_ns(99) == 0);
  CHECK(h.min_ns() == 0);
  CHECK(h.max_ns() == 0);
  CHECK(h.mean_ns() == 0);
  CHECK(h.cdf_us().empty());
}

TEST_CASE("sizes accept binary suffixes") {
  CHECK(measure::parse_size("4096") == 4096);
  CHECK(measure::parse_size("4K") == 4096);
  CHECK(measure::parse_size("4KiB") == 4096);
  CHECK(measure::parse_size("1m") == (1u << 20));
  CHECK(measure::parse_size("1MiB") == (1u << 20));
  CHECK(measure::parse_size("1G") == (1u << 30));
  CHECK_THROWS(measure::parse_size("1T"));
  CHECK_THROWS(measure::parse_size("K"));
  CHECK_THROWS(measure::parse_size("2K", 1024));
  CHECK(measure::format_size(4096) == "4 KiB");
  CHECK(measure::format_size(100) == "100 B");
}

TEST_CASE("a size list option rewrites every element") {
  CLI::App app("test");
  std::vector<std::size_t> sizes{1};
  measure::add_sizes_option(app, "--sizes", sizes, "sizes");
  const char* argv[] = {"test", "--sizes", "32,4K,1MiB"};
  REQUIRE(!measure::parse_command_line(app, 3, const_cast<char**>(argv)));
  CHECK(sizes == std::vector<std::size_t>{32, 4096, 1u << 20});
}

TEST_CASE("a bad option exits 2 and --help exits 0") {
  {
    CLI::App app("test");
    const char* argv[] = {"test", "--nope"};
    CHECK(measure::parse_command_line(app, 2, const_cast<char**>(argv)) == 2);
  }
  {
    CLI::App app("test");
    const char* argv[] = {"test", "--help"};
    CHECK(measure::parse_command_line(app, 2, const_cast<char**>(argv)) == 0);
  }
}

// Parses argv with the project's conventions; the exit status, or -1 to go on.
int parse(CLI::App& app, std::vector<const char*> argv) {
  argv.insert(argv.begin(), "test");
  const auto status = measure::parse_command_line(app, static_cast<int>(argv.size()),
                                                  const_cast<char**>(argv.data()));
  return status ? *status : -1;
}

TEST_CASE("integers are decimal: a leading zero is not octal, hex and signs are refused") {
  struct Case {
    const char* text;
    int status;
    std::uint64_t value;
  };
  for (const Case& c :
       {Case{"10", -1, 10}, Case{"010", -1, 10}, Case{"0", -1, 0}, Case{"000", -1, 0},
        Case{"0x10", 2, 7}, Case{"-1", 2, 7}, Case{"1e3", 2, 7}, Case{"", 2, 7}}) {
    CAPTURE(c.text);
    CLI::App app("test");
    std::uint64_t value = 7;
    app.add_option("--n", value)->check(CLI::Range(std::uint64_t{0}, std::uint64_t{1000}));
    CHECK(parse(app, {"--n", c.text}) == c.status);
    CHECK(value == c.value);
  }
  CLI::App app("test");
  int signed_value = 0;
  app.add_option("--i", signed_value);
  CHECK(parse(app, {"--i", "-012"}) == -1);
  CHECK(signed_value == -12);
}

TEST_CASE("a repeated option takes its last value, also in a subcommand; lists collect") {
  CLI::App app("test");
  std::uint64_t n = 0;
  std::string name;
  std::vector<std::size_t> sizes;
  app.add_option("--n", n);
  measure::add_sizes_option(app, "--sizes", sizes, "sizes");
  CLI::App* sub = app.add_subcommand("sub");
  sub->add_option("--name", name);
  CHECK(parse(app, {"--n", "5", "--n", "6", "--sizes", "1K", "sub", "--name", "a", "--name",
                    "b"}) == -1);
  CHECK(n == 6);
  CHECK(name == "b");
  CHECK(sizes == std::vector<std::size_t>{1024});
}

TEST_CASE("an empty result file name is a usage error") {
  CLI::App app("test");
  std::string json, csv;
  measure::add_output_options(app, json, csv);
  CHECK(parse(app, {"--json", ""}) == 2);
}

TEST_CASE("the result file keeps its key order and the CSV its columns") {
  measure::ResultFile file;
  file.transport = "udp";
  file.workload = "latency";
  file.run = {{"schema_version", 2}, {"git_rev", "abc"}};
  measure::Json point = {{"size", 32}, {"iters", 10}};
  Histogram h;
  h.record(5'000);
  measure::add_rtt_fields(point, h);
  file.results.push_back(point);
  file.results.push_back(measure::Json{{"size", 64}, {"note", "a,b"}});
  const auto j = measure::to_json(file);
  std::vector<std::string> keys;
  for (const auto& [key, value] : j.items()) keys.push_back(key);
  CHECK(keys == std::vector<std::string>{"schema_version", "system", "transport", "workload",
                                         "setup", "run", "config", "warnings", "results"});
  CHECK(!j["run"].contains("schema_version"));
  CHECK(j["results"][0]["rtt_p50_us"] == 5.0);

  const std::string path = "test_measure_output.csv";
  measure::write_csv(path, file);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  const std::string csv = text.str();
  CHECK(csv.rfind("system,transport,workload,git_rev,size,iters,rtt_p50_us,", 0) == 0);
  CHECK(csv.find("rtt_cdf") == std::string::npos);
  CHECK(csv.find("librpc,udp,latency,abc,64,,") != std::string::npos);
  CHECK(csv.find("\"a,b\"") != std::string::npos);
  std::remove(path.c_str());
}

TEST_CASE("p99.9 of 1000 samples is the 999th, not the maximum") {
  // 99.9 / 100 * 1000 is 999.0000000000001 in doubles: a rank computed in
  // floating point takes the 1000th sample. Values below 256 ns are exact.
  Histogram h;
  for (int i = 0; i < 999; ++i) h.record(100);
  h.record(200);
  CHECK(h.percentile_ns(99.9) == 100);
  CHECK(h.percentile_ns(100) == 200);
  CHECK(measure::nearest_rank(99.9, 1000) == 999);
  CHECK(measure::nearest_rank(99.9, 2000) == 1998);
  CHECK(measure::nearest_rank(99.99, 10'000) == 9999);
  CHECK(measure::nearest_rank(50, 1) == 1);
  CHECK(measure::nearest_rank(0, 10) == 1);
  CHECK(measure::nearest_rank(100, 10) == 10);
  CHECK(measure::nearest_rank(99.9, 3'000'000'000'000) == 2'997'000'000'000);
  CHECK(h.percentile_ns(std::numeric_limits<double>::quiet_NaN()) == 0);
}

TEST_CASE("the CDF ends at the maximum, also past the top bucket") {
  Histogram h;
  h.record(1000);
  const std::uint64_t huge = std::uint64_t{1} << 50;  // beyond the 2^40 ns range
  h.record(huge);
  const auto cdf = h.cdf_us();
  REQUIRE(!cdf.empty());
  CHECK(cdf.back().first == static_cast<double>(huge) / 1e3);
  CHECK(cdf.back().second == 1.0);
}

TEST_CASE("the load check counts runnable threads beside the run, not the load average") {
  const char* argv[] = {"test"};
  measure::RunInfo run(1, const_cast<char**>(argv));
  run.cpus = 2;
  run.load_avg_start = 5.0;  // a build that ended a few seconds ago
  run.load_avg_end = 5.0;
  run.runnable_start = 2;  // the sampler and a local server
  run.runnable_end = 1;
  CHECK(!measure::check_load(run, 1));  // one cpu left: the server fits
  CHECK(measure::check_load(run, 2));   // none left: the server competed
  run.runnable_end = 4;                 // two compilers beside a 1-core run
  const auto w = measure::check_load(run, 1);
  REQUIRE(w);
  CHECK(w->find("3 other threads runnable") != std::string::npos);
  run.runnable_start = run.runnable_end = -1;  // /proc/stat unreadable
  CHECK(!measure::check_load(run, 1));
}
