#!/usr/bin/env bash
# Runs bench/incast.sh with congestion control off and on, interleaved
# (off on off on ...), REPS times for each client count, and writes
# bench/compare/sections/incast.md from the medians and copies it into
# docs/benchmarks.md (bench/compare/report.py --sections-only). Needs root.
#
# Before them, for each client count, one run with 64-byte "bulk" requests
# (no congestion, the same processes): the probe latency this machine
# gives N+1 hosts on two cores, against which the others are read.
#
#   bench/incast_compare.sh [BUILD_DIR] [REPS] [CLIENT_COUNTS] [RATE] [DURATION_S]
#       defaults: build, 3, "8 32", 200mbit, 5 (twice that above 8 clients:
#       a client's fair share then moves a 1 MiB request in over a second)
#   Above 8 clients every host sleeps 200 us, not 20, when idle: 33 processes
#   waking every 20 us leave no CPU to the network stack.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
reps=${2:-3}
counts=${3:-8 32}
rate=${4:-200mbit}
duration=${5:-5}
link_gbps=${INCAST_LINK_GBPS:-1}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# run N CC REP DURATION IDLE [BULK]
run() {
  local n=$1 cc=$2 r=$3 dur=$4 idle=$5 bulk=${6:-1M} load rc
  load=$(cut -d' ' -f1 /proc/loadavg)
  set +e
  INCAST_JSON="$out/$n-$cc-$r.json" INCAST_IDLE_SLEEP_US=$idle INCAST_BULK=$bulk \
    INCAST_EXTRA="--cc ${cc/floor/off} --cc-link-gbps $link_gbps" \
    bash "$root/bench/incast.sh" "$build" "$n" "$rate" "$dur" > "$out/$n-$cc-$r.txt" 2>&1
  rc=$?
  set -e
  [ $rc -eq 77 ] && { grep SKIP "$out/$n-$cc-$r.txt"; exit 77; }
  echo "$load" > "$out/$n-$cc-$r.load"
  echo "$n clients, cc $cc, rep $r (load $load): $(grep 'incast summary' "$out/$n-$cc-$r.txt" | cut -c1-300)"
}
for n in $counts; do
  dur=$duration idle=20
  [ "$n" -gt 8 ] && { dur=$((duration * 2)); idle=200; }
  echo "$n $dur $idle" >> "$out/settings"
  run "$n" floor 1 "$dur" "$idle" 64
  for r in $(seq "$reps"); do
    for cc in off on; do run "$n" "$cc" "$r" "$dur" "$idle"; done
  done
done
python3 - "$out" "$reps" "$counts" "$rate" "$link_gbps" \
  "$root/bench/compare/sections/incast.md" "$(git -C "$root" rev-parse --short HEAD)" <<'PY'
import json, statistics, sys
out, reps, counts, rate, link, dest, git = sys.argv[1:8]
reps = int(reps)
settings = {l.split()[0]: l.split()[1:] for l in open(f"{out}/settings")}
def runs(n, cc, rr):
    res = []
    for r in rr:
        try:
            with open(f"{out}/{n}-{cc}-{r}.json") as f:
                s = json.load(f)["summary"]
        except (OSError, ValueError, KeyError):
            continue
        s["load"] = float(open(f"{out}/{n}-{cc}-{r}.load").read())
        res.append(s)
    return res
def med(rs, k):
    vals = [x[k] for x in rs if x.get(k) is not None]
    return statistics.median(vals) if vals else float("nan")
lines = ["## Incast", "",
         f"`bash bench/incast_compare.sh` at git {git}: `bench/incast.sh` with "
         f"congestion control off and on, interleaved, {reps} times each, medians. N client "
         "namespaces and a server namespace hang off a bridge in a router namespace; the "
         f"bridge's port toward the server is a `tc tbf` bottleneck of {rate} with a 200,000-byte "
         "queue. Each client keeps one session busy with back-to-back 1 MiB requests and sends "
         "a 32 B probe every millisecond on another. Congestion control on: `cc_link_gbps` "
         f"{link}. The *floor* row is one run with 64 B requests in place of 1 MiB ones: no "
         "congestion, the same processes, so its probe latency is what two cores give N+1 "
         "busy hosts.", "",
         "| Clients | Duration, idle sleep | Congestion control | Probe rtt p50 (µs) | Probe rtt p99 (µs) | "
         "Goodput, all clients (Mbit/s) | Jain's index | Retransmissions | Bottleneck drops | "
         "Load before |",
         "|---|---|---|---|---|---|---|---|---|---|"]
ratios = []
for n in counts.split():
    dur, idle = settings[n]
    for cc, rr in (("floor", [1]), ("off", range(1, reps + 1)), ("on", range(1, reps + 1))):
        rs = runs(n, cc, rr)
        label = {"floor": "off, 64 B requests (floor)", "off": "off", "on": "on"}[cc]
        if not rs:
            lines.append(f"| {n} | {dur} s, {idle} µs | {label} | (no run) |||||||")
            continue
        lines.append(f"| {n} | {dur} s, {idle} µs | {label} | {med(rs, 'probe_rtt_p50_us'):,.0f} | "
                     f"{med(rs, 'probe_rtt_p99_us'):,.0f} | {med(rs, 'goodput_mbps_total'):,.1f} | "
                     f"{med(rs, 'jain_index'):.2f} | {med(rs, 'retransmissions'):,.0f} | "
                     f"{med(rs, 'bottleneck_drops'):,.0f} | "
                     + ", ".join("%.2f" % x["load"] for x in rs) + " |")
    off, on = runs(n, "off", range(1, reps + 1)), runs(n, "on", range(1, reps + 1))
    if off and on:
        def ratio(k):
            d = med(off, k)
            return med(on, k) / d if d else float("nan")
        ratios.append(f"- {n} clients, on against off: probe p99 {ratio('probe_rtt_p99_us'):.2f}x, "
                      f"retransmissions {ratio('retransmissions'):.3f}x, bottleneck drops "
                      f"{ratio('bottleneck_drops'):.3f}x, Jain's index {med(on, 'jain_index'):.2f} "
                      f"(off {med(off, 'jain_index'):.2f}).")
lines += ["", "Ratios of the medians:", ""] + ratios + [
          "", "Targets (issue 12), with congestion control against without: probe p99 at most "
          "0.5x, retransmissions at most 0.1x, Jain's index at least 0.9."]
open(dest, "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
python3 "$root/bench/compare/report.py" --sections-only
