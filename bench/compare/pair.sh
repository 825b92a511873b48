#!/usr/bin/env bash
# Runs one of librpc's benchmark programs as two processes on this host, the
# way the same-host peers (ucx_perftest, fi_pingpong) run: a server process
# pinned to one CPU and a client process pinned to another, over 127.0.0.1.
#
#   bench/compare/pair.sh PROGRAM [ENDPOINT_ARGS...] -- [CLIENT_ARGS...]
#
# ENDPOINT_ARGS (--transport, --fabric-provider, --mtu, ...) go to both
# processes; CLIENT_ARGS (--sizes, --window, --json, ...) to the client
# only. The server runs `PROGRAM --mode server --server-uri 127.0.0.1:PORT
# ENDPOINT_ARGS`, the client `PROGRAM --mode client --server-uri
# 127.0.0.1:PORT ENDPOINT_ARGS CLIENT_ARGS` once the server says it serves;
# then the server gets SIGINT. The exit status is the client's (or 1 when
# the server did not come up). With `--json FILE` among CLIENT_ARGS the
# file's "setup" gains the placement (the programs' client and server modes
# do not pin by themselves). The server's output follows the client's,
# each line prefixed with "[server] ".
#
# Env: PAIR_PORT        the server's session-management UDP port (31950)
#      SERVER_CPU       CPU of the server process (1), CLIENT_CPU (0)
#      NO_PIN=1         do not pin
#      START_TIMEOUT_S  how long the server may take to start serving (10)
set -uo pipefail

prog=pair.sh
if [ $# -lt 1 ] || [[ $1 == -* ]]; then
  echo "usage: bench/compare/pair.sh PROGRAM [ENDPOINT_ARGS...] -- [CLIENT_ARGS...]" >&2
  exit 2
fi
program=$1
shift
endpoint=() client=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do endpoint+=("$1"); shift; done
[ $# -gt 0 ] && shift
client=("$@")

port=${PAIR_PORT:-31950}
server_cpu=${SERVER_CPU:-1} client_cpu=${CLIENT_CPU:-0}
start_timeout=${START_TIMEOUT_S:-10}
uri=127.0.0.1:$port
server_pin=() client_pin=() placement="two processes over 127.0.0.1, not pinned"
if [ "${NO_PIN:-0}" != 1 ] && taskset -c "$server_cpu,$client_cpu" true 2>/dev/null; then
  server_pin=(taskset -c "$server_cpu") client_pin=(taskset -c "$client_cpu")
  placement="two processes over 127.0.0.1 (bench/compare/pair.sh): server process pinned to CPU $server_cpu and client process to CPU $client_cpu with taskset (a \"not pinned\" below means the program did not pin its threads itself)"
fi

server_log=$(mktemp "${TMPDIR:-/tmp}/pair-server.XXXXXX") || exit 1
server_pid="" client_pid=""
cleanup() {
  local pid
  for pid in $client_pid $server_pid; do
    kill -INT "$pid" 2>/dev/null || true
    # A busy-polling server that ignores SIGINT for 5 s gets SIGKILL.
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  client_pid="" server_pid=""
  if [ -s "$server_log" ]; then sed 's/^/[server] /' "$server_log"; fi
  rm -f "$server_log"
}
trap cleanup EXIT
trap 'echo "$prog: interrupted" >&2; exit 130' INT
trap 'echo "$prog: terminated" >&2; exit 143' TERM

echo "$prog: server: ${server_pin[*]} $program --mode server --server-uri $uri ${endpoint[*]}"
"${server_pin[@]}" "$program" --mode server --server-uri "$uri" "${endpoint[@]}" \
  >"$server_log" 2>&1 &
server_pid=$!
waited=0
until grep -q 'Ctrl-C to stop' "$server_log"; do
  if ! kill -0 "$server_pid" 2>/dev/null; then
    echo "$prog: error: the server exited before serving" >&2
    exit 1
  fi
  if [ "$waited" -ge $((start_timeout * 10)) ]; then
    echo "$prog: error: the server did not start serving within $start_timeout s" >&2
    exit 1
  fi
  sleep 0.1
  waited=$((waited + 1))
done

echo "$prog: client: ${client_pin[*]} $program --mode client --server-uri $uri ${endpoint[*]} ${client[*]}"
# In the background, so that a signal's trap runs at once.
"${client_pin[@]}" "$program" --mode client --server-uri "$uri" "${endpoint[@]}" "${client[@]}" &
client_pid=$!
rc=0
wait "$client_pid" || rc=$?
client_pid=""

json=""
for ((i = 0; i < ${#client[@]}; i++)); do
  case "${client[$i]}" in
    --json) json=${client[$((i + 1))]:-} ;;
    --json=*) json=${client[$i]#--json=} ;;
  esac
done
if [ -n "$json" ] && [ -s "$json" ]; then
  "${PYTHON:-python3}" - "$json" "$placement" <<'PY' || echo "$prog: could not add the placement to $json" >&2
import json, sys
path, placement = sys.argv[1], sys.argv[2]
with open(path) as f:
    doc = json.load(f)
doc["setup"] = f"{placement}; {doc.get('setup', '')}"
with open(path, "w") as f:
    json.dump(doc, f, indent=2, ensure_ascii=False)
    f.write("\n")
PY
fi
exit "$rc"
