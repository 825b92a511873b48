# Schema-2 result files for the peer wrappers (bench/compare/SCHEMA.md):
# the "run" object and the load warning that tools/measure writes for the
# C++ programs. Source it, call result_start before the measurement, and
# result_head SYSTEM TRANSPORT WORKLOAD SETUP CONFIG_JSON BUSY_CORES after
# it: it prints the object's opening up to `"results":` (the caller prints
# the results array and the closing brace).

_load1() { cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo -1; }

_json_s() {
  local s=${1//\\/\\\\}
  s=${s//\"/\\\"}
  printf '"%s"' "${s//$'\t'/ }"
}

result_start() {
  _result_load_start=$(_load1)
  _result_started_utc=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  _result_started_s=$(date +%s)
  _result_command="$0 $*"
}

# The run object: like tools/measure/run_info.h's. REQUIRES: result_start,
# and _result_load_end set (result_head and result_wrap set it).
result_run_json() {
  local root git_rev cpus model
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
  git_rev=$(git -C "$root" describe --always --dirty --abbrev=12 2>/dev/null || echo unknown)
  cpus=$(nproc 2>/dev/null || echo 1)
  model=$(sed -n 's/^model name[[:space:]]*:[[:space:]]*//p' /proc/cpuinfo 2>/dev/null | head -n1)
  printf '{"git_rev":%s,"host":%s,"kernel":%s,"cpus":%d,"cpu_model":%s,"load_avg_start":%s,"load_avg_end":%s,"started_utc":%s,"command":%s}' \
    "$(_json_s "$git_rev")" "$(_json_s "$(hostname)")" "$(_json_s "$(uname -r)")" "$cpus" \
    "$(_json_s "${model:-unknown}")" "$_result_load_start" "$_result_load_end" \
    "$(_json_s "$_result_started_utc")" "$(_json_s "$_result_command")"
}

# The warnings array: the machine-busy check of tools/measure/trust.h (the
# end sample less what BUSY_CORES busy-polling threads add over the run).
result_warnings_json() {
  local busy=$1 cpus elapsed
  cpus=$(nproc 2>/dev/null || echo 1)
  elapsed=$(($(date +%s) - ${_result_started_s:-$(date +%s)}))
  awk -v s="$_result_load_start" -v e="$_result_load_end" -v c="$cpus" -v b="$busy" \
    -v t="$elapsed" 'BEGIN {
      th = c - b; if (th < 0.5) th = 0.5
      w = s; own = b * (1 - exp(-t / 60)); if (e - own > w) w = e - own
      if (w > th) printf "[\"machine busy: load average %.2f on %d cpus\"]", w, c
      else printf "[]"
    }'
}

result_head() {  # SYSTEM TRANSPORT WORKLOAD SETUP CONFIG_JSON BUSY_CORES
  local run
  _result_load_end=$(_load1)
  run=$(result_run_json)
  printf '{"schema_version":2,"system":%s,"transport":%s,"workload":%s,"setup":%s,"run":%s,"config":%s,"warnings":%s,"results":' \
    "$(_json_s "$1")" "$(_json_s "$2")" "$(_json_s "$3")" "$(_json_s "$4")" "$run" "$5" \
    "$(result_warnings_json "$6")"
}

# result_wrap FILE CONFIG_JSON BUSY_CORES: rewrites FILE, an object with
# system, transport, workload, setup and results, as a schema-2 file.
result_wrap() {
  local run warnings
  _result_load_end=$(_load1)
  run=$(result_run_json)
  warnings=$(result_warnings_json "$3")
  "${py:-python3}" - "$1" "$run" "$2" "$warnings" <<'PY'
import json, sys
path = sys.argv[1]
run, config, warnings = (json.loads(a) for a in sys.argv[2:5])
with open(path) as f:
    doc = json.load(f)
out = {"schema_version": 2}
out.update({k: doc.get(k) for k in ("system", "transport", "workload", "setup")})
out.update({"run": run, "config": config, "warnings": warnings,
            "results": doc.get("results", [])})
with open(path, "w") as f:
    json.dump(out, f)
    f.write("\n")
PY
}
