#!/usr/bin/env bash
# apps/kv against memcached, as docs/apps.md reports it: the same YCSB
# generator (librpc-kv-client load) drives librpc-kv-server and then
# memcached, back to back and interleaved (kv, memcached, kv, memcached ...)
# for --reps repetitions, each server pinned to CPU 0 and the load to CPU 1,
# one server thread each. memcaslap (libmemcached-tools' memaslap, its own
# event-driven loader) measures memcached's rate once per repetition too, as
# a figure nobody here wrote. Prints medians, their ratios and the load of
# the machine, and writes one JSON per run and summary.md.
#
#   bash bench/compare/kv_vs_memcached.sh [--reps N] [--duration-ms N] [--build DIR] [--out DIR]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
reps=5
duration_ms=3000
build=$root/build
out=""
while [ $# -gt 0 ]; do
  case $1 in
    --reps) reps=$2; shift ;;
    --duration-ms) duration_ms=$2; shift ;;
    --build) build=$2; shift ;;
    --out) out=$2; shift ;;
    *) echo "kv_vs_memcached.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
out=${out:-$build/compare-results/kv-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$out"
server_bin=$build/apps/kv/librpc-kv-server
client_bin=$build/apps/kv/librpc-kv-client
for b in "$server_bin" "$client_bin"; do
  [ -x "$b" ] || { echo "kv_vs_memcached.sh: $b not built (ninja -C $build)" >&2; exit 2; }
done
command -v memcached >/dev/null || { echo "kv_vs_memcached.sh: memcached not installed (scripts/install-deps.sh)" >&2; exit 2; }
memcaslap=$(command -v memcaslap || true)

pid=""
stop_server() { [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; pid=""; }
trap stop_server EXIT
free_port() {
  python3 -c "import socket; s=socket.socket(socket.AF_INET, socket.$1); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])"
}
start_kv() {
  kv_port=$(free_port SOCK_DGRAM)
  taskset -c 0 "$server_bin" --uri "127.0.0.1:$kv_port" --threads 1 --seconds 600 > "$out/kv-server.log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do grep -q listening "$out/kv-server.log" && return; sleep 0.1; done
  echo "kv_vs_memcached.sh: kv server did not start" >&2; exit 1
}
start_memcached() {
  mc_port=$(free_port SOCK_STREAM)
  taskset -c 0 memcached -l 127.0.0.1 -p "$mc_port" -U 0 -t 1 -m 1024 -u "$(id -un)" > "$out/memcached.log" 2>&1 &
  pid=$!
  for _ in $(seq 50); do (exec 3<>"/dev/tcp/127.0.0.1/$mc_port") 2>/dev/null && return; sleep 0.1; done
  echo "kv_vs_memcached.sh: memcached did not start" >&2; exit 1
}
load() {  # name, then load options
  local name=$1; shift
  echo "== $name" | tee -a "$out/runs.log"
  taskset -c 1 "$@" --duration-ms "$duration_ms" --json "$out/$name.json" | tee -a "$out/runs.log"
}

# memaslap's workload closest to YCSB-B: 16-byte keys, 32-byte values,
# 95% gets (its keys are uniform: it has no zipfian).
cat > "$out/memaslap.cfg" <<'CFG'
key
16 16 1
value
32 32 1
cmd
0 0.05
1 0.95
CFG

echo "kv_vs_memcached: $reps repetitions, ${duration_ms} ms each, $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$out/runs.log"
for r in $(seq "$reps"); do
  for wl in a b c; do
    start_kv
    load "kv-$wl-o1-r$r" "$client_bin" --server "127.0.0.1:$kv_port" load --workload "$wl" --outstanding 1
    load "kv-$wl-o8-r$r" "$client_bin" --server "127.0.0.1:$kv_port" load --workload "$wl" --outstanding 8
    stop_server
    start_memcached
    load "mc-$wl-o1-r$r" "$client_bin" --server "127.0.0.1:$mc_port" load --backend memcached --workload "$wl"
    if [ "$wl" = b ] && [ -n "$memcaslap" ]; then
      for c in 1 8; do
        echo "== memaslap-c$c-r$r" | tee -a "$out/runs.log"
        taskset -c 1 "$memcaslap" -s "127.0.0.1:$mc_port" -T 1 -c "$c" -t "$((duration_ms / 1000))s" \
          -F "$out/memaslap.cfg" > "$out/memaslap-c$c-r$r.log" 2>&1 || true
        grep -E "^Run time" "$out/memaslap-c$c-r$r.log" | tee -a "$out/runs.log" || true
      done
    fi
    stop_server
  done
done

/usr/bin/python3 - "$out" <<'PY' | tee "$out/summary.md"
import glob, json, os, re, statistics, sys
out = sys.argv[1]
runs = {}
loads = []
for f in sorted(glob.glob(os.path.join(out, "*.json"))):
    name = os.path.basename(f)[:-5]
    key = re.sub(r"-r\d+$", "", name)
    d = json.load(open(f))
    a = d["results"][0]
    runs.setdefault(key, []).append((a["throughput_ops_per_s"], a["rtt_p50_us"], a["rtt_p99_us"], a["rtt_p999_us"], len(d["warnings"])))
    loads.append(d["run"].get("load_avg_start", -1))
med = lambda xs: statistics.median(xs)
def row(key):
    xs = runs.get(key)
    if not xs: return None
    return [med([x[i] for x in xs]) for i in range(4)] + [sum(1 for x in xs if x[4] > 0), len(xs)]
print(f"Medians of {max(len(v) for v in runs.values())} interleaved repetitions; 1-min load at the runs' starts: {min(loads):.2f}..{max(loads):.2f}\n")
print("| workload | system | in flight | ops/s | p50 us | p99 us | p99.9 us | runs with warnings |")
print("|---|---|---|---|---|---|---|---|")
for wl in "abc":
    for key, system, inflight in ((f"kv-{wl}-o1", "librpc kv (udp)", 1), (f"kv-{wl}-o8", "librpc kv (udp)", 8), (f"mc-{wl}-o1", "memcached (libmemcached, tcp)", 1)):
        r = row(key)
        if r: print(f"| YCSB-{wl.upper()} | {system} | {inflight} | {r[0]:,.0f} | {r[1]:.1f} | {r[2]:.1f} | {r[3]:.1f} | {r[4]} of {r[5]} |")
print("\n| workload | kv/memcached ops/s, 1 in flight | kv/memcached p50 | kv 8 in flight / memcached ops/s |")
print("|---|---|---|---|")
for wl in "abc":
    k1, k8, m1 = row(f"kv-{wl}-o1"), row(f"kv-{wl}-o8"), row(f"mc-{wl}-o1")
    if k1 and k8 and m1:
        print(f"| YCSB-{wl.upper()} | {k1[0]/m1[0]:.2f}x | {k1[1]/m1[1]:.2f}x | {k8[0]/m1[0]:.2f}x |")
tps = {}
for f in glob.glob(os.path.join(out, "memaslap-c*-r*.log")):
    c = re.search(r"memaslap-c(\d+)-", f).group(1)
    m = re.search(r"TPS:\s*(\d+)", open(f).read())
    if m: tps.setdefault(c, []).append(int(m.group(1)))
for c in sorted(tps, key=int):
    print(f"\nmemaslap against the same memcached, {c} concurrent, ~YCSB-B (uniform keys): median {med(tps[c]):,.0f} ops/s over {len(tps[c])} runs")
PY
echo "kv_vs_memcached: results in $out"
