#!/usr/bin/env bash
# Real network faults: runs a librpc client and server (test/netns_peer.cc)
# on two "hosts" -- network namespaces with their own addresses joined by
# veth -- and injects loss, delay, reordering, duplication and corruption on
# the link, then flaps the link. Every scenario asserts that all requests
# complete with correct data and that the server's handler ran exactly once
# per request. See docs/reliability.md.
#
#   run_netns_tests.sh NETNS_PEER [NETNS_LINK]
#
# Faults come from `tc qdisc ... netem` on both veth ends when the kernel has
# sch_netem; otherwise from NETNS_LINK (test/netns/netns_link.cc), a
# userspace netem that forwards frames between two veth pairs through a
# third namespace. Environment:
#   NETNS_BACKEND=auto|netem|userspace   fault injector (default auto)
#   NETNS_SCENARIOS="loss-5% flap-long"  run only these scenarios
#   NETNS_SEED=N                         seed of the userspace netem
#   NETNS_KEEP_LOGS=1                    keep the per-scenario logs
# Needs root; exits 77 (skip) without it or without working `ip netns`.
# Output: one "PASS name (...)" or "FAIL name: why" line per scenario, then
# "N passed, M failed". Namespaces, qdiscs and processes are removed however
# the script ends (including ^C).
set -u

PEER=${1:-}
LINK=${2:-}
BACKEND=${NETNS_BACKEND:-auto}
ONLY=${NETNS_SCENARIOS:-}

skip() {
  echo "SKIP: $*"
  exit 77
}

if [ -z "$PEER" ] || [ ! -x "$PEER" ]; then
  echo "usage: run_netns_tests.sh NETNS_PEER [NETNS_LINK]" >&2
  exit 2
fi
[ "$(id -u)" -eq 0 ] || skip "needs root to create network namespaces"
command -v ip >/dev/null 2>&1 || skip "iproute2 (ip) is not installed"
command -v timeout >/dev/null 2>&1 || skip "coreutils timeout is not available"

ID=$$
NS_C=lrpc-c-$ID  # client host
NS_S=lrpc-s-$ID  # server host
NS_M=lrpc-m-$ID  # the userspace link (userspace backend only)
V_C=lrc$ID       # client's interface
V_S=lrs$ID       # server's interface
V_CM=lrcm$ID     # middle ends of the two veth pairs (userspace backend)
V_SM=lrsm$ID
IP_S=10.183.77.1 # an unlikely subnet; it exists only inside our namespaces
IP_C=10.183.77.2
PORT=31850
WORK=$(mktemp -d /tmp/librpc-netns.XXXXXX)
PIDS=()
CREATED_NS=()

# Every ip/tc command is time-bound.
# shellcheck source=../netns/netns_lib.sh
. "$(dirname "$0")/netns_lib.sh"

cleanup() {
  trap - EXIT INT TERM
  local pid
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for pid in "${PIDS[@]}"; do
    for _ in 1 2 3 4 5 6 7 8 9 10; do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null
  done
  local ns
  for ns in "${CREATED_NS[@]}"; do
    # Qdiscs and veths go with their namespace; delete them first anyway so
    # nothing lingers if a process still pins the namespace.
    T tc -n "$ns" qdisc del dev "$V_C" root >/dev/null 2>&1
    T tc -n "$ns" qdisc del dev "$V_S" root >/dev/null 2>&1
    T ip netns del "$ns" >/dev/null 2>&1
  done
  if [ "${NETNS_KEEP_LOGS:-0}" = 1 ]; then
    echo "logs kept in $WORK"
  else
    rm -rf "$WORK"
  fi
}
trap cleanup EXIT
trap 'echo "interrupted"; cleanup; exit 130' INT
trap 'echo "terminated"; cleanup; exit 143' TERM

now_ms() { echo $(($(date +%s%N) / 1000000)); }

# A reaped child leaves PIDS, so cleanup never signals a recycled PID.
forget_pid() {
  local keep=() p
  for p in "${PIDS[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done
  PIDS=("${keep[@]}")
}

# wait_pid PID SECONDS: the exit status, or 124 after killing it at the deadline.
wait_pid() {
  local pid=$1 end=$(($(now_ms) + $2 * 1000)) rc
  while kill -0 "$pid" 2>/dev/null; do
    if [ "$(now_ms)" -gt "$end" ]; then
      kill -KILL "$pid" 2>/dev/null
      wait "$pid" 2>/dev/null
      forget_pid "$pid"
      return 124
    fi
    sleep 0.05
  done
  wait "$pid" 2>/dev/null
  rc=$?
  forget_pid "$pid"
  return $rc
}

# wait_line FILE TEXT SECONDS PID: until FILE has TEXT; fails if PID exits first.
wait_line() {
  local end=$(($(now_ms) + $3 * 1000))
  until grep -q -- "$2" "$1" 2>/dev/null; do
    kill -0 "$4" 2>/dev/null || { grep -q -- "$2" "$1" 2>/dev/null; return; }
    [ "$(now_ms)" -gt "$end" ] && return 1
    sleep 0.02
  done
}

# kv FILE KEY: the last value of KEY=NUMBER in FILE (empty if none).
kv() { grep -o "\b$2=[0-9]*" "$1" 2>/dev/null | tail -1 | cut -d= -f2; }

mac_of() {  # NS IFACE
  T ip -n "$1" -o link show dev "$2" | grep -o 'link/ether [0-9a-f:]*' | cut -d' ' -f2
}

# Static neighbours: no ARP on a lossy link. Re-applied after a flap, which
# flushes the neighbour table of the interface taken down.
set_neighbours() {
  T ip -n "$NS_C" neigh replace "$IP_S" lladdr "$MAC_S" dev "$V_C" nud permanent &&
    T ip -n "$NS_S" neigh replace "$IP_C" lladdr "$MAC_C" dev "$V_S" nud permanent
}

setup() {
  new_ns "$NS_C" || skip "'ip netns add' does not work here"
  new_ns "$NS_S" || skip "'ip netns add' does not work here"
  if [ "$BACKEND" = auto ] || [ "$BACKEND" = netem ]; then
    if T tc -n "$NS_C" qdisc add dev lo root netem delay 1ms >/dev/null 2>&1; then
      T tc -n "$NS_C" qdisc del dev lo root >/dev/null 2>&1
      BACKEND=netem
    elif [ "$BACKEND" = netem ]; then
      skip "tc netem is not available (kernel without sch_netem?)"
    fi
  fi
  if [ "$BACKEND" != netem ]; then
    [ -n "$LINK" ] && [ -x "$LINK" ] || skip "no tc netem and no userspace link program"
    BACKEND=userspace
  fi
  if [ "$BACKEND" = netem ]; then
    T ip -n "$NS_C" link add "$V_C" type veth peer name "$V_S" netns "$NS_S" || return 1
  else
    new_ns "$NS_M" || return 1
    T ip -n "$NS_C" link add "$V_C" type veth peer name "$V_CM" netns "$NS_M" || return 1
    T ip -n "$NS_S" link add "$V_S" type veth peer name "$V_SM" netns "$NS_M" || return 1
    T ip -n "$NS_M" link set "$V_CM" up || return 1
    T ip -n "$NS_M" link set "$V_SM" up || return 1
  fi
  T ip -n "$NS_C" addr add "$IP_C/24" dev "$V_C" || return 1
  T ip -n "$NS_S" addr add "$IP_S/24" dev "$V_S" || return 1
  if [ "$BACKEND" = userspace ]; then
    # A NIC sends UDP GSO (the udp transport's segmented sends) as
    # MTU-sized frames; a veth passes the whole 64 KiB skb on, which the
    # AF_PACKET link cannot forward. One segment per skb makes the kernel
    # segment before the veth, as a NIC would on the wire.
    T ip -n "$NS_C" link set "$V_C" gso_max_segs 1 || return 1
    T ip -n "$NS_S" link set "$V_S" gso_max_segs 1 || return 1
  fi
  T ip -n "$NS_C" link set "$V_C" up || return 1
  T ip -n "$NS_S" link set "$V_S" up || return 1
  MAC_C=$(mac_of "$NS_C" "$V_C")
  MAC_S=$(mac_of "$NS_S" "$V_S")
  [ -n "$MAC_C" ] && [ -n "$MAC_S" ] || return 1
  set_neighbours
}

# ------------------------------------------------------------ faults

LINK_PID=
LINK_LOG=

# faults_on NAME NETEM-ARGS...: the fault model on both directions.
faults_on() {
  local name=$1
  shift
  if [ "$BACKEND" = netem ]; then
    [ $# -eq 0 ] && return 0
    T tc -n "$NS_C" qdisc replace dev "$V_C" root netem "$@" &&
      T tc -n "$NS_S" qdisc replace dev "$V_S" root netem "$@"
    return
  fi
  LINK_LOG=$WORK/$name.link
  local seed=${NETNS_SEED:-$RANDOM$RANDOM}
  ip netns exec "$NS_M" "$LINK" --a "$V_CM" --b "$V_SM" --seed "$seed" -- "$@" \
    >"$LINK_LOG" 2>&1 &
  LINK_PID=$!
  PIDS+=("$LINK_PID")
  wait_line "$LINK_LOG" "netns_link ready" 10 "$LINK_PID"
}

# faults_off: removes the faults; sets FAULT_NOTE to what they did.
faults_off() {
  FAULT_NOTE=
  if [ "$BACKEND" = netem ]; then
    local dropped=0 d dev ns
    for pair in "$NS_C:$V_C" "$NS_S:$V_S"; do
      ns=${pair%%:*}
      dev=${pair#*:}
      d=$(T tc -n "$ns" -s qdisc show dev "$dev" 2>/dev/null | grep -o 'dropped [0-9]*' |
        head -1 | cut -d' ' -f2)
      dropped=$((dropped + ${d:-0}))
      T tc -n "$ns" qdisc del dev "$dev" root >/dev/null 2>&1
    done
    FAULT_NOTE="netem dropped $dropped pkts"
    return
  fi
  if [ -n "$LINK_PID" ]; then
    kill -TERM "$LINK_PID" 2>/dev/null
    wait_pid "$LINK_PID" 5
    LINK_PID=
    local f v lost dup cor reo
    f=$(grep '^link_stats' "$LINK_LOG" 2>/dev/null)
    lost=0 dup=0 cor=0 reo=0
    for v in $(echo "$f" | grep -o 'lost=[0-9]*' | cut -d= -f2); do lost=$((lost + v)); done
    for v in $(echo "$f" | grep -o 'duplicated=[0-9]*' | cut -d= -f2); do dup=$((dup + v)); done
    for v in $(echo "$f" | grep -o 'corrupted=[0-9]*' | cut -d= -f2); do cor=$((cor + v)); done
    for v in $(echo "$f" | grep -o 'reordered=[0-9]*' | cut -d= -f2); do reo=$((reo + v)); done
    FAULT_NOTE="link lost $lost, duplicated $dup, corrupted $cor, reordered $reo frames"
  fi
}

link_down() { T ip -n "$NS_S" link set "$V_S" down; }
link_up() {
  T ip -n "$NS_S" link set "$V_S" up && set_neighbours
}

# Datagrams the receiving kernels dropped for a bad UDP checksum.
csum_errors() {
  local total=0 ns v
  for ns in "$NS_C" "$NS_S"; do
    v=$(T ip netns exec "$ns" awk '/^Udp:/ { if (!h) { for (i = 1; i <= NF; i++) if ($i == "InCsumErrors") c = i; h = 1 } else { print $c; exit } }' /proc/net/snmp 2>/dev/null)
    total=$((total + ${v:-0}))
  done
  echo "$total"
}

# ------------------------------------------------------------ scenarios

PASSED=0
FAILED=0

fail_detail() {
  local f
  for f in "$WORK/$NAME.client" "$WORK/$NAME.server" ${LINK_LOG:+"$LINK_LOG"}; do
    [ -f "$f" ] || continue
    echo "    --- ${f##*/}"
    tail -n 8 "$f" | sed 's/^/    /'
  done
}

# run NAME KIND "NETEM ARGS" CLIENT-ARGS...
#   KIND: plain | flap-short (must not reset) | flap-long (must reset) |
#         flap-border (may reset)
# Flap knobs: FLAP_DOWN_MS, FAILURE_TIMEOUT_MS.
run() {
  NAME=$1
  local kind=$2 netem=$3
  shift 3
  if [ -n "$ONLY" ] && ! [[ " $ONLY " == *" $NAME "* ]]; then return; fi
  local ft=${FAILURE_TIMEOUT_MS:-1000}
  local t0 slog=$WORK/$NAME.server clog=$WORK/$NAME.client
  t0=$(now_ms)
  LINK_LOG=
  local csum0
  csum0=$(csum_errors)
  # shellcheck disable=SC2086
  if ! faults_on "$NAME" $netem; then
    echo "FAIL $NAME: cannot apply faults '$netem'"
    FAILED=$((FAILED + 1))
    faults_off
    return
  fi
  ip netns exec "$NS_S" "$PEER" server --uri "$IP_S:$PORT" --failure-timeout-ms "$ft" \
    --max-seconds 120 >"$slog" 2>&1 &
  local spid=$!
  PIDS+=("$spid")
  if ! wait_line "$slog" "listening on" 10 "$spid"; then
    kill -KILL "$spid" 2>/dev/null
    wait_pid "$spid" 5
    faults_off
    echo "FAIL $NAME: the server did not start"
    fail_detail
    FAILED=$((FAILED + 1))
    return
  fi
  ip netns exec "$NS_C" "$PEER" client --server "$IP_S:$PORT" --uri "$IP_C:0" \
    --failure-timeout-ms "$ft" --timeout-s 40 "$@" >"$clog" 2>&1 &
  local cpid=$!
  PIDS+=("$cpid")
  local flap_note=
  if [ "$kind" != plain ]; then
    if wait_line "$clog" "streaming" 20 "$cpid"; then
      sleep 0.2
      local d0
      d0=$(now_ms)
      link_down
      sleep "$(awk "BEGIN { print ${FLAP_DOWN_MS} / 1000 }")"
      link_up
      flap_note="link down $(($(now_ms) - d0)) ms, failure timeout $ft ms"
    else
      flap_note="client never streamed"
    fi
  fi
  wait_pid "$cpid" 60
  local crc=$?
  kill -TERM "$spid" 2>/dev/null
  wait_pid "$spid" 10
  local src=$?
  faults_off
  local secs
  secs=$(awk "BEGIN { printf \"%.1f\", ($(now_ms) - $t0) / 1000 }")

  local n completed ok reset bad enq retx runs distinct dups sbad dup_ans sreset active csum
  n=$(echo "$*" | grep -o -- '--requests [0-9]*' | cut -d' ' -f2)
  completed=$(kv "$clog" completed)
  ok=$(kv "$clog" ok)
  reset=$(kv "$clog" reset)
  bad=$(kv "$clog" bad_data)
  enq=$(kv "$clog" enqueued)
  retx=$(kv "$clog" retransmissions)
  runs=$(kv "$slog" handler_runs)
  distinct=$(kv "$slog" distinct_requests)
  dups=$(kv "$slog" duplicates)
  sbad=$(grep '^server_stats' "$slog" | grep -o 'bad_data=[0-9]*' | cut -d= -f2)
  dup_ans=$(kv "$slog" dup_answered)
  sreset=$(kv "$slog" sessions_reset)
  active=$(kv "$slog" active_sessions)
  csum=$(($(csum_errors) - csum0))

  local why=
  if [ -z "$completed" ] || [ -z "$runs" ] || [ -z "$sbad" ] || [ -z "$active" ]; then
    why="missing output (client exit $crc, server exit $src)"
  elif [ "$crc" -ne 0 ]; then
    why="client exit $crc: $(grep '^FAILED' "$clog" | head -1)"
  elif [ "$src" -ne 0 ]; then
    why="server exit $src"
  elif [ "$bad" -ne 0 ] || [ "$sbad" -ne 0 ]; then
    why="wrong data: client bad_data=$bad, server bad_data=$sbad"
  elif [ "$runs" -ne "$distinct" ] || [ "$dups" -ne 0 ]; then
    why="handler ran more than once: handler_runs=$runs distinct_requests=$distinct duplicates=$dups"
  elif [ "$active" -ne 0 ]; then
    # The client disconnects before it exits: nothing may be left behind.
    why="the server still holds $active session(s) after the client left"
  elif [ "$kind" = flap-border ]; then
    if [ "$completed" -ne "$n" ] || [ $((ok + reset)) -ne "$n" ]; then
      why="completed=$completed ok=$ok reset=$reset of $n"
    elif [ "$distinct" -lt "$ok" ] || [ "$distinct" -gt "$n" ]; then
      why="server ran $distinct distinct requests; client had $ok ok of $n"
    fi
  elif [ "$kind" != flap-long ]; then
    if [ "$completed" -ne "$n" ] || [ "$ok" -ne "$n" ] || [ "$reset" -ne 0 ]; then
      why="completed=$completed ok=$ok reset=$reset of $n"
    elif [ "$runs" -ne "$n" ]; then
      why="handler_runs=$runs, want $n"
    elif [ "$kind" = flap-short ] && [ "$sreset" -ne 0 ]; then
      why="the server reset the session ($sreset)"
    fi
  else
    if [ "$completed" -ne "$enq" ] || [ "$reset" -lt 1 ]; then
      why="completed=$completed of $enq enqueued, reset=$reset"
    elif [ "$distinct" -lt "$ok" ] || [ "$distinct" -gt "$enq" ]; then
      why="server ran $distinct distinct requests; client had $ok ok of $enq"
    elif [ "$sreset" -lt 1 ]; then
      why="the server never freed the dead client's session"
    fi
  fi
  if [ -n "$flap_note" ] && [ "$flap_note" = "client never streamed" ] && [ -z "$why" ]; then
    why="the link was never cut: the client did not stream"
  fi

  local note="$retx retransmissions, $dup_ans answered from cache"
  [ -n "$FAULT_NOTE" ] && note="$note, $FAULT_NOTE"
  [ "$csum" -gt 0 ] && note="$note, $csum bad UDP checksums dropped"
  [ -n "$flap_note" ] && note="$note, $flap_note"
  if [ "$kind" != plain ] && [ "$reset" -gt 0 ] 2>/dev/null; then
    note="$reset reset, $(grep -o 'reconnected after [0-9]* ms' "$clog" | tail -1), $note"
  fi
  if [ -z "$why" ]; then
    echo "PASS $NAME ($completed requests, $note, ${secs} s)"
    PASSED=$((PASSED + 1))
  else
    echo "FAIL $NAME: $why ($note, ${secs} s)"
    fail_detail
    FAILED=$((FAILED + 1))
  fi
}

setup || {
  echo "FAIL setup: could not build the namespaces and veth link"
  echo "0 passed, 1 failed"
  exit 1
}
echo "netns: client $IP_C ($NS_C) <-> server $IP_S ($NS_S), faults by $BACKEND"

SIZES=0,1,1000,1500,5000,70000
# name kind netem-args client-args. RTOs above the link's round trip (the
# userspace link adds tens of microseconds per hop; delay adds milliseconds)
# so that retransmissions answer loss, not slowness.
run baseline plain "" --requests 600 --sizes $SIZES --rto-us 5000
run loss-1% plain "loss 1%" --requests 600 --sizes $SIZES --rto-us 2000
run loss-5% plain "loss 5%" --requests 600 --sizes $SIZES --rto-us 2000
run loss-20% plain "loss 20%" --requests 200 --sizes $SIZES --rto-us 2000
run delay-2ms-jitter-1ms plain "delay 2ms 1ms" --requests 80 --sizes $SIZES --rto-us 8000
run reorder plain "delay 1ms reorder 25% 50%" --requests 300 --sizes $SIZES --rto-us 10000
run duplicate-5% plain "duplicate 5%" --requests 600 --sizes $SIZES --rto-us 5000
run corrupt-1% plain "corrupt 1%" --requests 600 --sizes $SIZES --rto-us 2000
FAILURE_TIMEOUT_MS=1000 FLAP_DOWN_MS=400 \
  run flap-short flap-short "" --requests 600 --sizes $SIZES --duration-ms 2000 --rto-us 5000
FAILURE_TIMEOUT_MS=500 FLAP_DOWN_MS=1500 \
  run flap-long flap-long "" --requests 300 --sizes $SIZES --duration-ms 3000 --rto-us 5000 \
  --expect-reset
# The link comes back about when the failure timeout expires, so the two
# ends may disagree about the failure. Either outcome is fine, but nothing
# may be left behind and every request completes once. See
# docs/reliability.md, "Orphaned server sessions" and "Reused session
# numbers".
FAILURE_TIMEOUT_MS=500 FLAP_DOWN_MS=450 \
  run flap-border flap-border "" --requests 300 --sizes $SIZES --duration-ms 2500 --rto-us 5000 \
  --allow-reset

echo "$PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
