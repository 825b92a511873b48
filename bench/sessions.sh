#!/usr/bin/env bash
# Runs bench/librpc-sessions at 1,000 sessions (the server Rpc's default config)
# and at 20,000 (max_sessions raised, the documented config for many
# sessions), REPS times each, interleaved (1k 20k 1k 20k ...), with the
# load average and CPU idle share recorded before each run, and writes
# bench/compare/sections/sessions.md from the medians and copies it into
# docs/benchmarks.md (bench/compare/report.py --sections-only).
#
#   bench/sessions.sh [BUILD_DIR] [REPS]     (defaults: build, 5)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
reps=${2:-5}
prog=$build/bench/librpc-sessions
[ -x "$prog" ] || { echo "sessions.sh: $prog not built (ninja -C $build bench/librpc-sessions)" >&2; exit 2; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# CPU busy share (all CPUs) over 0.5 s, from /proc/stat.
busy_pct() {
  read -r _ u n s i w x y z _ < /proc/stat
  local t1=$((u + n + s + i + w + x + y + z)) i1=$((i + w))
  sleep 0.5
  read -r _ u n s i w x y z _ < /proc/stat
  local t2=$((u + n + s + i + w + x + y + z)) i2=$((i + w))
  echo $(( 100 * ((t2 - t1) - (i2 - i1)) / (t2 - t1) ))
}

declare -A args=(
  [1k]="--sessions 1000 --server-max-sessions 1024 --duration 2"
  [20k]="--sessions 20000 --duration 2"
)
for r in $(seq "$reps"); do
  for n in 1k 20k; do
    load=$(cut -d' ' -f1 /proc/loadavg)
    busy=$(busy_pct)
    # shellcheck disable=SC2086
    "$prog" ${args[$n]} --json "$out/$n-$r.json" > "$out/$n-$r.txt"
    echo "$n rep $r: load $load, busy $busy%: $(grep -o '[0-9]* sessions/s' "$out/$n-$r.txt"), $(grep -o '[0-9]* req/s' "$out/$n-$r.txt")"
    echo "$load $busy" > "$out/$n-$r.load"
  done
done

python3 - "$out" "$reps" "$root/bench/compare/sections/sessions.md" "$(git -C "$root" rev-parse --short HEAD)" <<'PY'
import json, statistics, sys, os
out, reps, dest, git = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
def runs(n):
    res = []
    for r in range(1, reps + 1):
        with open(f"{out}/{n}-{r}.json") as f:
            j = json.load(f)["results"][0]
        load, busy = open(f"{out}/{n}-{r}.load").read().split()
        j["load"], j["busy"] = float(load), int(busy)
        res.append(j)
    return res
rows = []
for n, label, cfg in (("1k", "1,000", "default (`max_sessions` 1024)"),
                      ("20k", "20,000", "`max_sessions` 20016")):
    rs = runs(n)
    med = lambda k: statistics.median(x[k] for x in rs)
    rows.append((label, cfg, med("connect_per_s"), med("server_rss_per_idle_session_bytes"),
                 med("server_rss_per_used_session_bytes"), med("rps"),
                 min(x["sessions_used"] for x in rs), sum(x["retransmissions"] for x in rs),
                 sum(x["errors"] + x["connect_failed"] + x["sessions_reset"] for x in rs),
                 rs[0]["server_stats"], [x["connect_per_s"] for x in rs], [x["rps"] for x in rs],
                 [(x["load"], x["busy"]) for x in rs]))
os.makedirs(os.path.dirname(dest), exist_ok=True)
with open(dest, "w") as f:
    f.write("## Sessions\n\n")
    f.write(f"`bash bench/sessions.sh` at git {git}: `bench/librpc-sessions` {reps} times per size, "
            "interleaved, medians. One client thread opens the sessions (at most 512 connects "
            "outstanding) to one server Rpc in a child process, over udp on 127.0.0.1, then "
            "keeps 256 requests of 32 B in flight, each on the next session in turn, for 2 s. "
            "Server memory is its VmRSS growth over the sessions, divided by their number: "
            "idle (connected, nothing sent yet) and after traffic. The server Rpc's RX ring is "
            "the default 4,096 entries: 64 sessions hold 64 credits each in it, the rest are "
            "admitted beyond it with 4 (docs/design.md, \"Sessions and ring room\").\n\n")
    f.write("| Sessions | Server config | Connects/s (one thread) | Server RSS per idle session | "
            "per used session | Requests/s, all sessions in use | Sessions used (min) | "
            "Retransmissions (all runs) | Failures |\n|---|---|---|---|---|---|---|---|---|\n")
    for r in rows:
        f.write(f"| {r[0]} | {r[1]} | {r[2]:,.0f} | {r[3]:,.0f} B | {r[4]:,.0f} B | {r[5]:,.0f} | "
                f"{r[6]:,} | {r[7]} | {r[8]} |\n")
    f.write("\nTargets (issue 12): at least 20,000 sessions on one server Rpc, and 1,000 with the "
            "default config; at most 2 KB per idle session apart from ring entries; at least "
            "20,000 connects/s from one client thread.\n\n")
    f.write("Per repetition (connects/s; requests/s; load average and CPU busy % before):\n\n")
    for r in rows:
        f.write(f"- {r[0]}: " + "; ".join(
            f"{c:,.0f} / {q:,.0f} (load {l:.2f}, {b}%)" for c, q, (l, b) in zip(r[10], r[11], r[12]))
            + "\n")
    f.write("\nServer's stats at the end of the first run of each size:\n\n")
    for r in rows:
        f.write(f"- {r[0]}: `{r[9]}`\n")
    f.write("\nA session after traffic holds the request slots it has used, eight at a time "
            "(about 4 KB on a server and 2.7 KB on a client for each eight; a session has "
            "up to 32, and its first eight come with its first request) and the response "
            "buffer of each slot it used; an idle one holds neither.\n")
print(open(dest).read())
PY
python3 "$root/bench/compare/report.py" --sections-only
