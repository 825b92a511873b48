#!/usr/bin/env bash
# Incast through a real bottleneck: N client hosts send to one server
# through one link. Every host is a network namespace; the clients and the
# server hang off a bridge in a router namespace, and the bridge's port
# toward the server is a `tc tbf` bottleneck with a bounded queue (the
# kernel's own stack, no emulation of ours). Each client (bench/librpc-incast)
# keeps one session busy with back-to-back bulk requests and measures small
# probes on another. Reported per client and in all: probe p50/p99, bulk
# goodput, retransmissions, and the bottleneck's drops (`tc -s qdisc`);
# Jain's fairness index over the clients' goodput.
#
#   bench/incast.sh [BUILD_DIR] [N] [RATE] [DURATION_S]
#       defaults: build, 8 clients, 200mbit, 5 s
#   Env: INCAST_QUEUE_BYTES (tbf limit, default 200000), INCAST_IDLE_SLEEP_US
#   (default 20: hosts that sleep when idle, so that N+1 hosts share the
#   cores), INCAST_BULK (bulk request size, default 1M), INCAST_JSON (write
#   the summary as JSON there), INCAST_EXTRA (more flags for every host),
#   INCAST_STRICT=1 (the test suite's check: fail unless every client
#   finished at least one bulk request and saw no error; no timing check).
# Needs root; exits 77 (skip) without it. Namespaces and processes are
# removed however the script ends.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$root/build}
N=${2:-8}
RATE=${3:-200mbit}
DURATION=${4:-5}
QUEUE=${INCAST_QUEUE_BYTES:-200000}
IDLE=${INCAST_IDLE_SLEEP_US:-20}
BULK=${INCAST_BULK:-1M}
EXTRA=${INCAST_EXTRA:-}
PROG=$BUILD/bench/librpc-incast

skip() {
  echo "SKIP: $*"
  exit 77
}
[ -x "$PROG" ] || { echo "incast.sh: $PROG not built" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || skip "needs root to create network namespaces"
command -v ip >/dev/null && command -v tc >/dev/null || skip "needs iproute2 (ip, tc)"

ID=$$
NS_R=lrpc-ir-$ID
NS_S=lrpc-is-$ID
BR=lrbr$ID
SUBNET=10.184
IP_S=$SUBNET.0.1
PORT=31850
WORK=$(mktemp -d /tmp/librpc-incast.XXXXXX)
PIDS=()
CREATED=()
T() { timeout 10 "$@"; }

cleanup() {
  trap - EXIT INT TERM
  local pid ns
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  sleep 0.2
  for pid in "${PIDS[@]}"; do kill -KILL "$pid" 2>/dev/null; done
  for ns in "${CREATED[@]}"; do T ip netns del "$ns" >/dev/null 2>&1; done
  rm -rf "$WORK"
}
trap cleanup EXIT INT TERM

mkns() {
  T ip netns add "$1" || skip "cannot create network namespaces (ip netns add failed)"
  CREATED+=("$1")
  T ip -n "$1" link set lo up
}

# Router with the bridge.
mkns "$NS_R"
T ip -n "$NS_R" link add "$BR" type bridge
T ip -n "$NS_R" link set "$BR" up
# host NS, its address, its interface name and the router-side name
attach() {
  local ns=$1 addr=$2 ifc=$3 peer=$4
  T ip link add "$ifc" netns "$ns" type veth peer name "$peer" netns "$NS_R"
  T ip -n "$ns" addr add "$addr/16" dev "$ifc"
  T ip -n "$ns" link set "$ifc" up
  T ip -n "$NS_R" link set "$peer" master "$BR"
  T ip -n "$NS_R" link set "$peer" up
}
mkns "$NS_S"
attach "$NS_S" "$IP_S" lris$ID lrrs$ID
# The bottleneck: the bridge port toward the server sends at RATE, with a
# queue of QUEUE bytes; what does not fit is dropped.
T tc -n "$NS_R" qdisc add dev lrrs$ID root tbf rate "$RATE" burst 32kb limit "$QUEUE" ||
  skip "tc tbf is not available"
for i in $(seq 1 "$N"); do
  mkns "lrpc-ic$i-$ID"
  attach "lrpc-ic$i-$ID" "$SUBNET.1.$i" lric$i lrrc$i$ID
done

# shellcheck disable=SC2086
ip netns exec "$NS_S" "$PROG" --mode server --server-uri "$IP_S:$PORT" \
  --idle-sleep-us "$IDLE" $EXTRA > "$WORK/server.txt" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do grep -q ready "$WORK/server.txt" 2>/dev/null && break; sleep 0.05; done
grep -q ready "$WORK/server.txt" || { echo "incast.sh: the server did not start"; cat "$WORK/server.txt"; exit 1; }

CPIDS=()
for i in $(seq 1 "$N"); do
  # shellcheck disable=SC2086
  ip netns exec "lrpc-ic$i-$ID" "$PROG" --mode client --server-uri "$IP_S:$PORT" \
    --client-uri "$SUBNET.1.$i:0" --duration "$DURATION" --bulk-size "$BULK" \
    --idle-sleep-us "$IDLE" --json "$WORK/client$i.json" $EXTRA > "$WORK/client$i.txt" 2>&1 &
  CPIDS+=($!)
  PIDS+=($!)
done
fail=0
for pid in "${CPIDS[@]}"; do wait "$pid" || fail=1; done
T tc -n "$NS_R" -s qdisc show dev lrrs$ID > "$WORK/qdisc.txt"
kill -TERM "${PIDS[0]}" 2>/dev/null
wait "${PIDS[0]}" 2>/dev/null
cat "$WORK"/client*.txt
cat "$WORK/server.txt" | grep stats
cat "$WORK/qdisc.txt"

python3 - "$WORK" "$N" "$RATE" "$QUEUE" "${INCAST_JSON:-}" "${INCAST_STRICT:-0}" <<'PY'
import json, re, statistics, sys
work, n, rate, queue, out = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
strict = sys.argv[6] == "1"
clients = []
for i in range(1, n + 1):
    try:
        with open(f"{work}/client{i}.json") as f:
            clients.append(json.load(f)["results"][0])
    except (OSError, ValueError, KeyError, IndexError):
        pass
qdisc = open(f"{work}/qdisc.txt").read()
m = re.search(r"dropped (\d+)", qdisc)
drops = int(m.group(1)) if m else -1
good = [c["goodput_mbps"] for c in clients]
jain = (sum(good) ** 2) / (len(good) * sum(g * g for g in good)) if good and any(good) else 0.0
summary = {
    "clients": n, "clients_reported": len(clients), "rate": rate, "queue_bytes": int(queue),
    "probe_rtt_p50_us": statistics.median(c["probe_rtt_p50_us"] for c in clients) if clients else None,
    "probe_rtt_p99_us": statistics.median(c["probe_rtt_p99_us"] for c in clients) if clients else None,
    "probe_rtt_p99_max_us": max(c["probe_rtt_p99_us"] for c in clients) if clients else None,
    "goodput_mbps_total": sum(good), "jain_index": jain,
    "retransmissions": sum(c["retransmissions"] for c in clients),
    "errors": sum(c["errors"] for c in clients), "bottleneck_drops": drops,
}
print("incast summary: " + json.dumps(summary))
if out:
    with open(out, "w") as f:
        json.dump({"summary": summary, "clients": clients}, f, indent=1)
if len(clients) != n:
    print(f"incast: {n - len(clients)} of {n} clients reported nothing")
    sys.exit(1)
if strict:
    idle = [c["client"] for c in clients if c["bulk_completed"] == 0]
    failed = [c["client"] for c in clients if c["errors"] != 0]
    if idle or failed:
        print(f"incast: no bulk request finished by {idle}; errors at {failed}")
        sys.exit(1)
sys.exit(0)
PY
rc=$?
[ $fail -eq 0 ] && [ $rc -eq 0 ] || exit 1
