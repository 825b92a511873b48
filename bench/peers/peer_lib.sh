# Shared by the peer wrappers that run a third-party server and client on
# loopback (sockperf.sh, iperf3.sh, qperf.sh): argument and number checks,
# pinning, the background server/client pair with its cleanup and signal
# traps, and JSON string quoting. Source it after setting `prog`.

die() {
  echo "$prog: error: $*" >&2
  exit 1
}

# peer_outdir ARGS...: the single OUTDIR argument, or usage and exit 2.
peer_outdir() {
  if [[ $# -ne 1 || $1 == -* ]]; then
    echo "usage: bench/peers/$prog OUTDIR" >&2
    exit 2
  fi
  outdir=$1
  mkdir -p "$outdir/logs" || die "cannot create $outdir/logs"
}

# require_uints NAME...: each named variable is a non-negative integer.
require_uints() {
  local v
  for v in "$@"; do
    [[ ${!v} =~ ^[0-9]+$ ]] || die "$v must be a non-negative integer, got '${!v}'"
  done
}

# Pinning: server on CPU 1, client on CPU 0 with taskset, unless NO_PIN=1
# or the machine has fewer CPUs. Sets server_pin, client_pin, placement.
peer_pinning() {
  server_pin=() client_pin=() placement="two processes over 127.0.0.1, not pinned"
  if [[ ${NO_PIN:-0} != 1 ]] && taskset -c 0,1 true 2>/dev/null; then
    server_pin=(taskset -c 1) client_pin=(taskset -c 0)
    placement="two processes over 127.0.0.1, server pinned to CPU 1 and client to CPU 0 (taskset)"
  fi
}

# Both sides run in the background, so that a signal's trap runs at once
# (bash defers traps while a foreground child runs); cleanup stops them.
server_pid="" client_pid=""
peer_cleanup() {
  local pid
  for pid in $client_pid $server_pid; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  server_pid="" client_pid=""
}
trap peer_cleanup EXIT
trap 'echo "$prog: interrupted" >&2; exit 130' INT
trap 'echo "$prog: terminated" >&2; exit 143' TERM

# port_busy t|u PORT: something listens on (or is bound to) that TCP or UDP port.
port_busy() {
  ss "-Hl${1}n" "sport = :$2" | grep -q .
}

# start_server t|u PORT LOG CMD...: runs CMD in the background and waits
# up to 10 s for it to listen on PORT.
start_server() {
  local proto=$1 port=$2 log=$3 tries=0
  shift 3
  "$@" >"$log" 2>&1 &
  server_pid=$!
  until port_busy "$proto" "$port"; do
    kill -0 "$server_pid" 2>/dev/null || die "server exited early; see $log"
    ((++tries <= 100)) || die "server not listening on port $port after 10 s; see $log"
    sleep 0.1
  done
}

# run_client TIMEOUT_S LOG CMD...: runs CMD within TIMEOUT_S seconds, output
# to LOG; dies with the log's last line when it fails or times out.
run_client() {
  local limit=$1 log=$2 rc=0
  shift 2
  timeout "$limit" "$@" >"$log" 2>&1 &
  client_pid=$!
  wait "$client_pid" || rc=$?
  client_pid=""
  if ((rc != 0)); then
    ((rc == 124)) && die "client timed out after $limit s; see $log"
    die "client failed (exit $rc): $(tail -n1 "$log"); see $log"
  fi
}

json_str() {
  local s=${1//\\/\\\\}
  printf '"%s"' "${s//\"/\\\"}"
}
