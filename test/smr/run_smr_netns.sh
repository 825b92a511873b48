#!/usr/bin/env bash
# apps/smr across network namespaces: three replica "hosts", each joined to
# a bridge (a switch) in a middle namespace through its own userspace link
# (test/netns/netns_link.cc: netem's loss/delay model, since this kernel has
# no sch_netem). Scenarios:
#   baseline            leader elected; writes committed and read back
#   leader-kill         the leader is SIGKILLed while a client streams writes:
#                       a new leader within the bound, no acknowledged write lost
#   partition-minority  the leader is cut off (its switch port down): a write
#                       sent to it is never acknowledged and, after healing,
#                       is not in the store; the majority elects a leader and
#                       commits; all replicas converge
#   loss-5%, loss-20%   loss on every link: a concurrent register history is
#                       linearizable and the replicas converge (same applied
#                       index, same state digest)
#   disk-restart        replicas on libraft's disk store (--data-dir), 5% loss:
#                       the leader is SIGKILLed during a concurrent history and
#                       restarted from its directory; the history is
#                       linearizable and all three converge
#
#   bench               (only when asked: SMR_SCENARIOS=bench) raw UDP round trip
#                       between two hosts (udp_pingpong, the 5th argument) and
#                       the replicated commit latency and write rate, on the same
#                       links; result files in SMR_BENCH_DIR (default: the work dir)
#
#   run_smr_netns.sh REPLICA CLIENT CHECKER NETNS_LINK [UDP_PINGPONG]
# Needs root; exits 77 (skip) without it. SMR_SCENARIOS="a b" runs some only.
set -u
REPLICA=$1
CLIENT=$2
CHECKER=$3
LINK=$4
PINGPONG=${5:-}
ONLY=${SMR_SCENARIOS:-}
skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "needs root to create network namespaces"
command -v ip >/dev/null 2>&1 || skip "iproute2 (ip) is not installed"
for p in "$REPLICA" "$CLIENT" "$LINK"; do [ -x "$p" ] || { echo "not executable: $p" >&2; exit 2; }; done

ID=$(($$ % 100000))
NS_M=smr-m-$ID
WORK=$(mktemp -d /tmp/librpc-smr-netns.XXXXXX)
ELECTION_MS=500
HEARTBEAT_MS=50
PORT=31850
declare -A NS IP MAC LINKPID
for i in 1 2 3; do
  NS[$i]=smr-h$i-$ID
  IP[$i]=10.184.77.$i
done
PEERS="1=${IP[1]}:$PORT,2=${IP[2]}:$PORT,3=${IP[3]}:$PORT"
# shellcheck source=smr_lib.sh
. "$(dirname "$0")/smr_lib.sh"
CREATED_NS=()

# shellcheck source=../netns/netns_lib.sh
. "$(dirname "$0")/../netns/netns_lib.sh"
cleanup() {
  trap - EXIT INT TERM
  stop_all
  local i ns
  for i in "${!LINKPID[@]}"; do kill -TERM "${LINKPID[$i]}" 2>/dev/null; wait "${LINKPID[$i]}" 2>/dev/null; done
  for ns in "${CREATED_NS[@]}"; do T ip netns del "$ns" >/dev/null 2>&1; done
  if [ "${SMR_KEEP_LOGS:-0}" = 1 ]; then echo "logs in $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'echo interrupted; exit 130' INT TERM

setup() {
  new_ns "$NS_M" || skip "'ip netns add' does not work here"
  T ip -n "$NS_M" link add br0 type bridge || return 1
  T ip -n "$NS_M" link set br0 up || return 1
  local i
  for i in 1 2 3; do
    new_ns "${NS[$i]}" || return 1
    new_ns "smr-l$i-$ID" || return 1
    T ip -n "${NS[$i]}" link add "h$i" type veth peer name "l$i" netns "smr-l$i-$ID" || return 1
    T ip -n "smr-l$i-$ID" link add "lb$i" type veth peer name "m$i" netns "$NS_M" || return 1
    T ip -n "$NS_M" link set "m$i" master br0 || return 1
    T ip -n "$NS_M" link set "m$i" up || return 1
    T ip -n "smr-l$i-$ID" link set "l$i" up || return 1
    T ip -n "smr-l$i-$ID" link set "lb$i" up || return 1
    T ip -n "${NS[$i]}" addr add "${IP[$i]}/24" dev "h$i" || return 1
    # The AF_PACKET link forwards frames, not 64 KiB GSO skbs (as in
    # test/netns/run_netns_tests.sh).
    T ip -n "${NS[$i]}" link set "h$i" gso_max_segs 1 || return 1
    T ip -n "${NS[$i]}" link set "h$i" up || return 1
    MAC[$i]=$(T ip -n "${NS[$i]}" -o link show dev "h$i" | grep -o 'link/ether [0-9a-f:]*' | cut -d' ' -f2)
  done
  local j
  # Static neighbours: no ARP across lossy links.
  for i in 1 2 3; do
    for j in 1 2 3; do
      [ "$i" = "$j" ] && continue
      T ip -n "${NS[$i]}" neigh replace "${IP[$j]}" lladdr "${MAC[$j]}" dev "h$i" nud permanent || return 1
    done
  done
}

# links NETEM-ARGS...: (re)starts the three links with this fault model.
links() {
  local i
  for i in "${!LINKPID[@]}"; do kill -TERM "${LINKPID[$i]}" 2>/dev/null; wait "${LINKPID[$i]}" 2>/dev/null; done
  LINKPID=()
  for i in 1 2 3; do
    ip netns exec "smr-l$i-$ID" "$LINK" --a "l$i" --b "lb$i" -- "$@" >"$WORK/link$i.txt" 2>&1 &
    LINKPID[$i]=$!
  done
  for i in 1 2 3; do
    for _ in $(seq 100); do grep -q "netns_link ready" "$WORK/link$i.txt" && break; sleep 0.05; done
    grep -q "netns_link ready" "$WORK/link$i.txt" || return 1
  done
}

# client NS-INDEX ARGS...: the client on host i.
client() {
  local i=$1
  shift
  ip netns exec "${NS[$i]}" timeout 120 "$CLIENT" --uri "${IP[$i]}:0" "$@"
}

start_cluster() {
  stop_all
  local i
  for i in 1 2 3; do
    [ -f "$WORK/r$i.log" ] && cat "$WORK/r$i.log" >>"$WORK/all-r$i.txt"
    rm -f "$WORK/r$i.log"
    start_replica "$i" ip netns exec "${NS[$i]}"
  done
  # Not in $( ): the replicas' pids must stay in this shell's RPID.
  LEADER=$(wait_leader 15)
}

# converged: stops the replicas; true when all report the same applied
# index and state digest. Sets CONVERGE_NOTE.
converged() {
  stop_all
  local i vals=() v
  for i in 1 2 3; do
    v=$(grep -o 'last_applied=[0-9]* digest=[0-9a-f]*' "$WORK/r$i.log" | tail -1)
    vals+=("$v")
  done
  CONVERGE_NOTE="${vals[0]}"
  [ -n "${vals[0]}" ] && [ "${vals[0]}" = "${vals[1]}" ] && [ "${vals[1]}" = "${vals[2]}" ] && return 0
  CONVERGE_NOTE="replicas differ: ${vals[*]}"
  return 1
}

want() { { [ -z "$ONLY" ] && [ "$1" != bench ]; } || [[ " $ONLY " == *" $1 "* ]]; }

setup || { echo "FAIL setup"; echo "0 passed, 1 failed"; exit 1; }
links || { echo "FAIL setup: links did not start"; exit 1; }
echo "netns: replicas ${IP[1]} ${IP[2]} ${IP[3]}, each behind a userspace link, one bridge"

# ---------------------------------------------------------------- baseline
if want baseline; then
  start_cluster
  leader=$LEADER
  if [ -z "$leader" ]; then
    fail "baseline: no leader within 15 s"
  else
    out=$(client 1 --peers "$PEERS" put hello world 2>&1)
    got=$(client 2 --peers "$PEERS" get hello 2>&1)
    client 3 --peers "$PEERS" stream --count 200 --acked "$WORK/b.acked" >"$WORK/b.stream" 2>&1
    src=$?
    client 1 --peers "$PEERS" verify --acked "$WORK/b.acked" >"$WORK/b.verify" 2>&1
    vrc=$?
    if [[ $got != value=world* ]]; then
      fail "baseline: put said '$out', get said '$got'"
    elif [ $src -ne 0 ] || [ $vrc -ne 0 ]; then
      fail "baseline: stream exit $src, verify exit $vrc: $(tail -1 "$WORK/b.verify")"
    else
      pass "baseline (replica $leader leads; $got; $(tail -1 "$WORK/b.verify"))"
    fi
  fi
fi

# ------------------------------------------------------------- leader-kill
if want leader-kill; then
  start_cluster
  old=$LEADER
  if [ -z "$old" ]; then
    fail "leader-kill: no leader"
  else
    c=$((old % 3 + 1))  # a surviving host runs the client
    client "$c" --peers "$PEERS" stream --count 400 --acked "$WORK/k.acked" >"$WORK/k.stream" 2>&1 &
    spid=$!
    EXTRA_PIDS+=("$spid")
    for _ in $(seq 300); do [ "$(cat "$WORK/k.acked" 2>/dev/null | wc -l)" -ge 100 ] && break; sleep 0.05; done
    before=$(wc -l <"$WORK/k.acked")
    t_kill=$(now_ms)
    kill -KILL "${RPID[$old]}"
    wait "${RPID[$old]}" 2>/dev/null
    unset "RPID[$old]"
    new=$(wait_leader 10 "$old")
    t_new=$(($(leader_since_ms "${new:-0}" || echo 0) - t_kill))
    wait "$spid"
    src=$?
    client "$c" --peers "$PEERS" verify --acked "$WORK/k.acked" >"$WORK/k.verify" 2>&1
    vrc=$?
    if [ -z "$new" ]; then
      fail "leader-kill: no new leader after killing $old"
    elif [ "$t_new" -gt $((4 * ELECTION_MS + 1000)) ]; then  # two vote rounds (run_smr_loopback.sh)
      fail "leader-kill: new leader $new only after $t_new ms (election timeout $ELECTION_MS ms)"
    elif [ $src -ne 0 ] || [ $vrc -ne 0 ]; then
      fail "leader-kill: stream exit $src, verify exit $vrc: $(tail -1 "$WORK/k.verify")"
    else
      pass "leader-kill (killed $old after $before acked; $new leads after $t_new ms; $(tail -1 "$WORK/k.verify"))"
    fi
  fi
fi

# ------------------------------------------------------ partition-minority
if want partition-minority; then
  start_cluster
  old=$LEADER
  if [ -z "$old" ]; then
    fail "partition-minority: no leader"
  else
    client 1 --peers "$PEERS" put before-partition 1 >/dev/null 2>&1
    T ip -n "$NS_M" link set "m$old" down
    t_cut=$(now_ms)
    # A write to the cut-off leader only: it must never be acknowledged.
    client "$old" --peers "$old=${IP[$old]}:$PORT" --attempt-timeout-ms 500 --deadline-ms 3000 \
      put minority-key lost >"$WORK/p.minority" 2>&1
    mrc=$?
    maj=$((old % 3 + 1))
    new=$(wait_leader 10 "$old")
    out=$(client "$maj" --peers "$PEERS" put majority-key kept 2>&1)
    arc=$?
    stepped=$(grep "^replica $old: state=" "$WORK/r$old.log" | tail -1 | grep -o 'state=[a-z]*')
    T ip -n "$NS_M" link set "m$old" up
    sleep 2  # the old leader rejoins, truncates its uncommitted entry, catches up
    lost=$(client "$old" --peers "$PEERS" get minority-key 2>&1)
    kept=$(client "$old" --peers "$PEERS" get majority-key 2>&1)
    sleep 1  # followers learn the last commit index from the next heartbeats
    if [ $mrc -eq 0 ]; then
      fail "partition-minority: the cut-off leader acknowledged a write: $(cat "$WORK/p.minority")"
    elif [ -z "$new" ] || [ $arc -ne 0 ]; then
      fail "partition-minority: the majority did not commit (leader '${new:-}', put: $out)"
    elif [[ $lost != "not found"* ]]; then
      fail "partition-minority: the unacknowledged minority write is visible: $lost"
    elif [[ $kept != value=kept* ]]; then
      fail "partition-minority: the majority's write did not read back: $kept"
    elif ! converged; then
      fail "partition-minority: $CONVERGE_NOTE"
    else
      pass "partition-minority (cut $old: its write unacknowledged and absent after healing; it was $stepped when healed; $new led the majority; $CONVERGE_NOTE)"
    fi
  fi
fi

# ------------------------------------------------------------------- loss
loss_scenario() {  # NAME NETEM-ARGS...
  local name=$1
  shift
  want "$name" || return
  if ! links "$@"; then
    fail "$name: links did not start"
    return
  fi
  start_cluster
  if [ -z "$LEADER" ]; then
    fail "$name: no leader"
    return
  fi
  client 1 --peers "$PEERS" --attempt-timeout-ms 1000 history --clients 4 --ops 600 --keys 3 \
    --out "$WORK/$name.jsonl" >"$WORK/$name.history" 2>&1
  local hrc=$? check crc
  check=$(python3 "$CHECKER" "$WORK/$name.jsonl" 2>&1)
  crc=$?
  client 2 --peers "$PEERS" put final 1 >/dev/null 2>&1
  sleep 2
  local lost
  lost=$(grep -h '^link_stats' "$WORK"/link*.txt 2>/dev/null | grep -o 'lost=[0-9]*' | cut -d= -f2 | paste -sd+ | bc 2>/dev/null)
  if [ $hrc -ne 0 ]; then
    fail "$name: history client: $(tail -1 "$WORK/$name.history")"
  elif [ $crc -ne 0 ]; then
    fail "$name: $check"
  elif ! converged; then
    fail "$name: $CONVERGE_NOTE"
  else
    pass "$name ($check; $(tail -1 "$WORK/$name.history" | grep -o 'redirects=[0-9]*'); converged at $CONVERGE_NOTE)"
  fi
}
loss_scenario loss-5% loss 5%
loss_scenario loss-20% loss 20%

if want disk-restart; then
  links loss 5%
  for i in 1 2 3; do mkdir -p "$WORK/data$i"; done
  SMR_EXTRA_OF() { echo "--data-dir $WORK/data$1"; }
  stop_all
  for i in 1 2 3; do
    [ -f "$WORK/r$i.log" ] && cat "$WORK/r$i.log" >>"$WORK/all-r$i.txt"
    rm -f "$WORK/r$i.log"
    SMR_EXTRA=$(SMR_EXTRA_OF "$i") start_replica "$i" ip netns exec "${NS[$i]}"
  done
  if ! l=$(wait_leader 15); then
    fail "disk-restart: no leader"
  else
    client 1 --peers "$PEERS" --attempt-timeout-ms 1000 history --clients 4 --ops 800 --keys 3 \
      --out "$WORK/disk.jsonl" >"$WORK/disk.history" 2>&1 &
    hpid=$!
    EXTRA_PIDS+=("$hpid")
    for _ in $(seq 500); do [ "$(cat "$WORK/disk.jsonl" 2>/dev/null | wc -l)" -ge 150 ] && break; sleep 0.02; done
    at_kill=$(cat "$WORK/disk.jsonl" 2>/dev/null | wc -l)
    kill -KILL "${RPID[$l]}"
    wait "${RPID[$l]}" 2>/dev/null
    unset "RPID[$l]"
    sleep 1
    SMR_EXTRA=$(SMR_EXTRA_OF "$l") start_replica "$l" ip netns exec "${NS[$l]}"
    wait "$hpid"
    hrc=$?
    check=$(python3 "$CHECKER" "$WORK/disk.jsonl" 2>&1)
    crc=$?
    client 2 --peers "$PEERS" put final 1 >/dev/null 2>&1
    sleep 2
    restarted=$(grep -c "listening" "$WORK/r$l.log")
    if [ $hrc -ne 0 ]; then
      fail "disk-restart: history client: $(tail -1 "$WORK/disk.history")"
    elif [ $crc -ne 0 ]; then
      fail "disk-restart: $check"
    elif [ "$at_kill" -ge 800 ]; then
      fail "disk-restart: the leader was killed after the history ended"
    elif [ "$restarted" -ne 2 ]; then
      fail "disk-restart: replica $l started $restarted times"
    elif ! converged; then
      fail "disk-restart: $CONVERGE_NOTE"
    else
      pass "disk-restart (leader $l killed after $at_kill of 800 operations, restarted from disk, 5% loss; $check; converged at $CONVERGE_NOTE)"
    fi
  fi
fi
links

# ------------------------------------------------------------------ bench
if want bench; then
  out=${SMR_BENCH_DIR:-$WORK}
  mkdir -p "$out"
  if [ -z "$PINGPONG" ] || [ ! -x "$PINGPONG" ]; then
    fail "bench: give udp_pingpong as the 5th argument"
  else
    ip netns exec "${NS[2]}" "$PINGPONG" server --bind "${IP[2]}:40000" >"$WORK/pp.server" 2>&1 &
    ppid=$!
    EXTRA_PIDS+=("$ppid")
    sleep 0.3
    ip netns exec "${NS[1]}" timeout 60 "$PINGPONG" client --server "${IP[2]}:40000" --size 32 \
      --iters 20000 --warmup 1000 --json "$out/udp_rtt.json" >"$WORK/pp.client" 2>&1
    kill -TERM "$ppid" 2>/dev/null
    wait "$ppid" 2>/dev/null
    echo "raw UDP round trip, host 1 <-> host 2 (32 B, busy-polling both ends):"
    sed 's/^/  /' "$WORK/pp.client" | tail -6
    start_cluster
    c=$((LEADER % 3 + 1))  # the client on a follower's host: client -> leader crosses a link
    for conc in 1 16; do
      client "$c" --peers "$PEERS" bench --seconds 5 --concurrency "$conc" --value-bytes 16 \
        --json "$out/smr_commit_c$conc.json" >"$WORK/bench$conc.txt" 2>&1
      echo "replicated put, client on host $c, leader $LEADER, $conc in flight:"
      sed 's/^/  /' "$WORK/bench$conc.txt"
    done
    pass "bench (result files in $out)"
  fi
fi

stop_all
echo "$PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
