#include "run_info.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <ctime>
#include <fstream>
#include <limits>
#include <string>
#include <thread>

#include "measure_git_rev.h"

namespace measure {
namespace {

double monotonic_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    // x86: "model name", arm64: often none; fall back to the first "Hardware"/"cpu model".
    if (line.rfind("model name", 0) == 0 || line.rfind("cpu model", 0) == 0 ||
        line.rfind("Hardware", 0) == 0) {
      const auto colon = line.find(':');
      if (colon == std::string::npos) continue;
      const auto start = line.find_first_not_of(" \t", colon + 1);
      return start == std::string::npos ? "" : line.substr(start);
    }
  }
  return "unknown";
}

std::string utc_now_iso8601() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace

double load_average_1min() {
  std::ifstream in("/proc/loadavg");
  double load = -1;
  if (!(in >> load)) return -1;
  return load;
}

int runnable_threads() {
  std::array<int, 5> samples{};
  for (std::size_t i = 0; i < samples.size(); ++i) {
    if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::ifstream in("/proc/stat");
    std::string key;
    int value = -1;
    while (in >> key) {
      if (key == "procs_running") {
        in >> value;
        break;
      }
      in.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
    }
    if (value < 0) return -1;
    samples[i] = value;
  }
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

int online_cpus() {
  const long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

RunInfo::RunInfo(int argc, char** argv)
    : git_rev(MEASURE_GIT_REV),
      cpus(online_cpus()),
      cpu_model(cpu_model_name()),
      load_avg_start(load_average_1min()),
      runnable_start(runnable_threads()),
      started_utc(utc_now_iso8601()),
      started_monotonic_s(monotonic_s()) {
  if (git_rev.empty()) git_rev = "unknown";
  char name[256] = {};
  host = gethostname(name, sizeof name - 1) == 0 ? name : "unknown";
  utsname uts{};
  kernel = uname(&uts) == 0 ? uts.release : "unknown";
  for (int i = 0; i < argc; ++i) {
    if (i > 0) command += ' ';
    command += argv[i];
  }
}

void RunInfo::finish() {
  load_avg_end = load_average_1min();
  runnable_end = runnable_threads();
  finished_monotonic_s = monotonic_s();
}

nlohmann::ordered_json RunInfo::to_json() const {
  nlohmann::ordered_json j;
  j["schema_version"] = kSchemaVersion;
  j["git_rev"] = git_rev;
  j["host"] = host;
  j["kernel"] = kernel;
  j["cpus"] = cpus;
  j["cpu_model"] = cpu_model;
  j["load_avg_start"] = load_avg_start;
  j["load_avg_end"] = load_avg_end >= 0 ? nlohmann::ordered_json(load_avg_end) : nullptr;
  j["runnable_start"] = runnable_start;
  j["runnable_end"] = runnable_end >= 0 ? nlohmann::ordered_json(runnable_end) : nullptr;
  j["started_utc"] = started_utc;
  j["command"] = command;
  return j;
}

}  // namespace measure
