# Shared by the smr test scripts (sourced): start, watch and kill replicas,
# wait for lines in their logs. Each script sets WORK, REPLICA, PEERS and
# the arrays of replica ids; cleanup kills what was started.
now_ms() { date +%s%3N; }

declare -A RPID=()  # replica id -> pid
EXTRA_PIDS=()

# start_replica ID [PREFIX...]: PREFIX (e.g. "ip netns exec NS") runs it.
start_replica() {
  local id=$1
  shift
  "$@" "$REPLICA" --seconds 300 --id "$id" --peers "$PEERS" --election-timeout-ms "$ELECTION_MS" \
    --heartbeat-ms "$HEARTBEAT_MS" --snapshot-threshold "${SNAPSHOT_THRESHOLD:-128}" \
    --snapshot-trailing 32 ${SMR_EXTRA:-} >>"$WORK/r$id.log" 2>&1 &
  RPID[$id]=$!
}

stop_all() {
  local id pid
  for pid in "${EXTRA_PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for id in "${!RPID[@]}"; do kill -TERM "${RPID[$id]}" 2>/dev/null; done
  for id in "${!RPID[@]}"; do
    for _ in $(seq 50); do kill -0 "${RPID[$id]}" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "${RPID[$id]}" 2>/dev/null
    wait "${RPID[$id]}" 2>/dev/null
  done
  for pid in "${EXTRA_PIDS[@]}"; do kill -KILL "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; done
  RPID=()
  EXTRA_PIDS=()
}

# The id of the replica whose log last says it leads, among live ones, or
# nothing. A replica's role lines are "replica N: state=S term=T leader=L".
current_leader() {
  local id best= best_term=0 line term
  for id in "${!RPID[@]}"; do
    kill -0 "${RPID[$id]}" 2>/dev/null || continue
    line=$(grep "^replica $id: state=" "$WORK/r$id.log" 2>/dev/null | tail -1)
    [[ $line == *state=leader* ]] || continue
    term=$(echo "$line" | grep -o 'term=[0-9]*' | cut -d= -f2)
    if [ "$term" -gt "$best_term" ]; then best=$id; best_term=$term; fi
  done
  echo "$best"
}

# wait_leader SECONDS [NOT_ID]: prints the leader's id once one (other than
# NOT_ID) leads; fails at the deadline.
wait_leader() {
  local end=$(($(now_ms) + $1 * 1000)) l
  while [ "$(now_ms)" -lt "$end" ]; do
    l=$(current_leader)
    if [ -n "$l" ] && [ "$l" != "${2:-}" ]; then echo "$l"; return 0; fi
    sleep 0.02
  done
  return 1
}

# wall_ms of replica ID's last role line (the replica's own clock reading).
leader_since_ms() {
  grep "^replica $1: state=leader" "$WORK/r$1.log" | tail -1 | grep -o 'wall_ms=[0-9]*' | cut -d= -f2
}

# The term in the last role line of replica ID.
term_of() {
  grep "^replica $1: state=" "$WORK/r$1.log" | tail -1 | grep -o 'term=[0-9]*' | cut -d= -f2
}

PASSED=0
FAILED=0
pass() { echo "PASS $*"; PASSED=$((PASSED + 1)); }
fail() {
  echo "FAIL $*"
  FAILED=$((FAILED + 1))
  local f
  for f in "$WORK"/*.log; do
    echo "    --- ${f##*/}"
    tail -n 6 "$f" | sed 's/^/    /'
  done
}
