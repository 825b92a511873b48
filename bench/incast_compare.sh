#!/usr/bin/env bash
# Runs bench/incast.sh with congestion control off and on, interleaved
# (off on off on ...), REPS times for each client count, and writes
# bench/compare/sections/incast.md from the medians (report.py copies it
# into docs/benchmarks.md). Needs root.
#
#   bench/incast_compare.sh [BUILD_DIR] [REPS] [CLIENT_COUNTS] [RATE] [DURATION_S]
#       defaults: build, 2, "8 32", 200mbit, 5
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
reps=${2:-2}
counts=${3:-8 32}
rate=${4:-200mbit}
duration=${5:-5}
link_gbps=${INCAST_LINK_GBPS:-1}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for n in $counts; do
  for r in $(seq "$reps"); do
    for cc in off on; do
      load=$(cut -d' ' -f1 /proc/loadavg)
      set +e
      INCAST_JSON="$out/$n-$cc-$r.json" INCAST_EXTRA="--cc $cc --cc-link-gbps $link_gbps" \
        bash "$root/bench/incast.sh" "$build" "$n" "$rate" "$duration" > "$out/$n-$cc-$r.txt" 2>&1
      rc=$?
      set -e
      [ $rc -eq 77 ] && { grep SKIP "$out/$n-$cc-$r.txt"; exit 77; }
      echo "$load" > "$out/$n-$cc-$r.load"
      echo "$n clients, cc $cc, rep $r (load $load): $(grep 'incast summary' "$out/$n-$cc-$r.txt" | cut -c1-300)"
    done
  done
done
python3 - "$out" "$reps" "$counts" "$rate" "$duration" "$link_gbps" \
  "$root/bench/compare/sections/incast.md" "$(git -C "$root" rev-parse --short HEAD)" <<'PY'
import json, statistics, sys
out, reps, counts, rate, duration, link, dest, git = sys.argv[1:9]
reps = int(reps)
def runs(n, cc):
    res = []
    for r in range(1, reps + 1):
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
         f"a 32 B probe every millisecond on another, for {duration} s; every host sleeps 20 µs "
         "when a loop iteration finds nothing to do (N+1 hosts share two cores). Congestion "
         f"control on: `cc_link_gbps` {link}.", "",
         "| Clients | Congestion control | Probe p50 (µs) | Probe p99 (µs) | Goodput, all clients "
         "(Mbit/s) | Jain's index | Retransmissions | Bottleneck drops | Load before |",
         "|---|---|---|---|---|---|---|---|---|"]
for n in counts.split():
    for cc in ("off", "on"):
        rs = runs(n, cc)
        if not rs:
            lines.append(f"| {n} | {cc} | (no run) |||||||")
            continue
        lines.append(f"| {n} | {cc} | {med(rs, 'probe_p50_us'):,.0f} | {med(rs, 'probe_p99_us'):,.0f} | "
                     f"{med(rs, 'goodput_mbps_total'):,.1f} | {med(rs, 'jain_index'):.2f} | "
                     f"{med(rs, 'retransmissions'):,.0f} | {med(rs, 'bottleneck_drops'):,.0f} | "
                     + ", ".join("%.2f" % x["load"] for x in rs) + " |")
lines += ["", "Targets (issue 12), with congestion control against without: probe p99 at most "
          "0.5x, retransmissions at most 0.1x, Jain's index at least 0.9. Congestion control "
          "is off by default until they are met (docs/design.md, \"Congestion control\")."]
open(dest, "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
