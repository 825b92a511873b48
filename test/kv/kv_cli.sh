#!/usr/bin/env bash
# The kv programs as a user runs them: librpc-kv-server with two partitions
# on loopback; librpc-kv-client's put/get/delete and their exit statuses; a
# short YCSB load with its result file; usage errors; then the same load
# generator against memcached (started here on a free port; the test skips
# with 77 where memcached is not installed).
#   bash test/kv/kv_cli.sh KV_SERVER KV_CLIENT
set -euo pipefail
server_bin=$1
client_bin=$2
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "kv_cli: FAIL: $*" >&2; exit 1; }
free_port() {  # $1: SOCK_DGRAM or SOCK_STREAM
  python3 -c "import socket; s=socket.socket(socket.AF_INET, socket.$1); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])"
}
expect_output() {  # expected, command...
  local expected=$1; shift
  local out
  out=$("$@") || fail "'$*' exited with $?"
  [ "$out" = "$expected" ] || fail "'$*' printed '$out', expected '$expected'"
}
check_json() {  # file system
  python3 - "$1" "$2" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["system"] == sys.argv[2], d["system"]
all_ = d["results"][0]
assert all_["op"] == "all" and all_["ops"] > 0, all_
assert all_["failures"] == 0 and all_["misses"] == 0, all_
assert all_["rtt_p50_us"] > 0 and all_["throughput_ops_per_s"] > 0, all_
assert {r["op"] for r in d["results"]} == {"all", "get", "put"}, d["results"]
print(f"kv_cli: {sys.argv[2]}: {all_['ops']} ops, p50 {all_['rtt_p50_us']} us")
PY
}

port=$(free_port SOCK_DGRAM)
"$server_bin" --uri "127.0.0.1:$port" --threads 2 --seconds 240 > "$tmp/server.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do grep -q "listening" "$tmp/server.log" && break; sleep 0.1; done
grep -q "listening on 127.0.0.1:$port (2 partitions" "$tmp/server.log" || fail "server did not start: $(cat "$tmp/server.log")"
client=("$client_bin" --server "127.0.0.1:$port")

echo "== put, get, delete"
expect_output stored "${client[@]}" put greeting "hello, kv"
expect_output "hello, kv" "${client[@]}" get greeting
expect_output deleted "${client[@]}" delete greeting
expect_output "not found" "${client[@]}" delete greeting
rc=0; "${client[@]}" get greeting 2> "$tmp/err" || rc=$?
[ $rc -eq 1 ] && grep -q "'greeting' not found" "$tmp/err" || fail "get of a deleted key: exit $rc, $(cat "$tmp/err")"
rc=0; "${client[@]}" put "$(printf 'k%.0s' $(seq 251))" v 2> "$tmp/err" || rc=$?
[ $rc -eq 1 ] && grep -q "invalid key" "$tmp/err" || fail "a 251-byte key: exit $rc, $(cat "$tmp/err")"

echo "== usage errors exit 2"
for args in "load --workload d" "load --backend memcached --outstanding 2" "load --value-bytes 2MiB" "frobnicate"; do
  rc=0; "${client[@]}" $args > /dev/null 2>&1 || rc=$?
  [ $rc -eq 2 ] || fail "'$args' exited $rc, expected 2"
done

echo "== YCSB-A load, zipfian, 2 outstanding"
"${client[@]}" load --workload a --keys 2000 --value-bytes 32 --value-bytes-max 512 \
  --outstanding 2 --warmup-ms 100 --duration-ms 500 --json "$tmp/kv.json" --csv "$tmp/kv.csv"
check_json "$tmp/kv.json" librpc-kv
[ "$(wc -l < "$tmp/kv.csv")" -eq 4 ] || fail "the CSV has $(wc -l < "$tmp/kv.csv") lines, expected 4"

echo "== a server that is not there: a clear failure"
dead=$(free_port SOCK_DGRAM)
rc=0; timeout 60 "$client_bin" --server "127.0.0.1:$dead" get x 2> "$tmp/err" || rc=$?
[ $rc -eq 1 ] && grep -q "cannot connect to rpc 0" "$tmp/err" || fail "dead server: exit $rc, $(cat "$tmp/err")"

memcached_bin=$(command -v memcached || true)
[ -x "${memcached_bin:-/usr/bin/memcached}" ] || memcached_bin=/usr/bin/memcached
if [ ! -x "$memcached_bin" ]; then
  echo "kv_cli: SKIP: the librpc checks passed; no memcached to check the memcached backend against"
  exit 77
fi
echo "== the same load against memcached"
mport=$(free_port SOCK_STREAM)
# -U 0: no UDP listener; -u: memcached refuses to run as root without it.
"$memcached_bin" -l 127.0.0.1 -p "$mport" -U 0 -t 1 -m 64 -u "$(id -un)" > "$tmp/memcached.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do (exec 3<>"/dev/tcp/127.0.0.1/$mport") 2>/dev/null && break; sleep 0.1; done
"$client_bin" --server "127.0.0.1:$mport" load --backend memcached --workload a --keys 2000 \
  --value-bytes 32 --value-bytes-max 512 --warmup-ms 100 --duration-ms 500 --json "$tmp/mc.json"
check_json "$tmp/mc.json" memcached
echo "kv_cli: all checks passed"
