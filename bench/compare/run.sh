#!/usr/bin/env bash
# Runs every benchmark of the comparison back to back on loopback and writes
# docs/benchmarks.md (+ docs/benchmarks/*.png) with bench/compare/report.py.
#
#   bash bench/compare/run.sh [--quick] [--no-install] [--no-build] [--reps N]
#                             [--sections LIST]
#
# --quick       smoke run: every duration and iteration count ~10x shorter
# --no-install  skip the apt-get steps (scripts/install-deps.sh and friends)
# --no-build    use the binaries in build/ as they are
# --reps N      repetitions of the interleaved comparisons (3; --quick: 2)
# --sections L  run only these sections, comma-separated (default: all; env
#               SECTIONS): a latency, b rate, c goodput, d CPU cost, e
#               spurious retransmissions, f same host (alias: samehost). A
#               run of some sections writes its report into the results
#               directory, not docs/; the same-host section alone builds
#               only its programs and takes ~4 minutes on a quiet machine
#               (a busy one: up to ~10; --quick: ~2):
#                 bash bench/compare/run.sh --no-install --sections samehost
#
# The 32 B latency and the goodput comparisons run interleaved, A B C A B C
# ..., N times (steps <id>_r1, <id>_r2, ...), so that a slow minute of a
# shared machine hits every system alike; the report gives medians over the
# repetitions and each repetition's numbers with the machine's load. Each
# step records the 1-minute load average and the share of the CPUs other
# work kept busy just before it. The rate section, the latency sweep and the
# CPU cost run once. The same-host section (f) interleaves its 32 B latency,
# 32 B rate and 8 MiB goodput comparisons the same way, each librpc run as
# two processes (bench/compare/pair.sh), like its peers.
#
# Results go to build/compare-results/<timestamp>/ (not committed): one JSON
# file per step (bench/compare/SCHEMA.md), its log, commands.txt (every
# command exactly as run), steps.tsv (status, load and repetition of every
# step, read by the report) and machine.txt. A step that fails or times out
# is recorded and the run goes on; the report shows it as "failed: reason".
# Regenerate the report from a results directory with
#   /usr/bin/python3 bench/compare/report.py build/compare-results/<timestamp>
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root" || exit 1

quick=0
do_install=1
do_build=1
reps=""
sections=${SECTIONS:-all}
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1 ;;
    --no-install) do_install=0 ;;
    --no-build) do_build=0 ;;
    --reps) reps=${2:-}; shift ;;
    --reps=*) reps=${1#--reps=} ;;
    --sections) sections=${2:-}; shift ;;
    --sections=*) sections=${1#--sections=} ;;
    -h|--help) sed -n '2,37p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
  shift
done
if [ -n "$reps" ] && ! [[ "$reps" =~ ^[1-9][0-9]?$ ]]; then
  echo "run.sh: --reps needs a number from 1 to 99, got '$reps'" >&2
  exit 2
fi
sections=${sections//samehost/f}
[ "$sections" = all ] && sections=a,b,c,e,d,f
if ! [[ "$sections" =~ ^[a-f](,[a-f])*$ ]]; then
  echo "run.sh: --sections takes a comma-separated list of a, b, c, d, e, f (samehost) or all" >&2
  exit 2
fi
# section X: whether section X runs.
section() { [[ ",$sections," == *",$1,"* ]]; }
all_sections=1
for x in a b c d e f; do section "$x" || all_sections=0; done

run_start=$(date +%s)
build=build
bench=$build/bench
stamp=$(date -u +%Y%m%d-%H%M%S)
out=$build/compare-results/$stamp
[ "$quick" -eq 1 ] && out=$out-quick
mkdir -p "$out" || exit 1
ln -sfn "$(basename "$out")" "$build/compare-results/latest"
commands=$out/commands.txt
steps=$out/steps.tsv
: > "$commands"
printf 'id\trole\tworkload\tlabel\tstatus\trc\telapsed_s\toutput\treason\tbusy_pct\trep\tload1\n' > "$steps"

# ---------------------------------------------------------------------------
# Sizes of the run. The full run takes ~6 minutes on a quiet 2-core machine
# (and ~4 more for the same-host section, f);
# on a busy one it also waits up to 60 s before starting and up to 10 s before
# each step for other work to finish (~20 minutes at most).
if [ "$quick" -eq 1 ]; then
  : "${reps:=2}"
  lat_iters=20000; lat_warmup=1000      # 32 B latency points
  sweep_iters=2000; sweep_warmup=200    # latency vs size, per size
  sweep_cap_s=1.5                       # librpc: cap on each size's warmup and run
  grpc_iters=2000; grpc_warmup=200
  rate_s=0.5; rate_warmup_s=0.1         # per window
  stream_s=0.5
  large_s=0.5                           # per message size
  cpu_n1=200; cpu_n2=400
  quiet_wait_s=10; step_wait_s=0       # waits for other work to finish
  # bench/peers/*.sh take their counts from the env.
  peer_env=(ITERS=10000 LAT_ITERS=10000 LAT_WARMUP=1000 RATE_ITERS_TCP=100000
            RATE_ITERS_SHM=1000000 BW_ITERS=50 RUN_TIMEOUT_S=60 DURATION_S=1 OMIT_S=1)
else
  : "${reps:=3}"
  lat_iters=200000; lat_warmup=10000
  sweep_iters=20000; sweep_warmup=2000
  sweep_cap_s=10
  grpc_iters=20000; grpc_warmup=2000
  rate_s=5; rate_warmup_s=0.5
  stream_s=5
  large_s=2
  cpu_n1=2000; cpu_n2=4000
  quiet_wait_s=60; step_wait_s=10
  peer_env=(RUN_TIMEOUT_S=120)  # the scripts' own defaults otherwise
fi
goodput_size=8388608  # the size of the goodput targets (8 MiB)
windows=(1 8 32 128)
sweep_sizes=(32 64 128 256 512 1024 2048 4096 8192 16384 32768 65536)
large_sizes=4096,8192,16384,32768,65536,131072,262144,524288,1048576,2097152,4194304,8388608

# Percentage of all CPUs busy over half a second, from /proc/stat.
cpu_busy_pct() {
  local s1 s2
  s1=$(head -n 1 /proc/stat); sleep 0.5; s2=$(head -n 1 /proc/stat)
  awk -v a="$s1" -v b="$s2" 'BEGIN {
    split(a, x, " "); split(b, y, " "); total = 0
    for (i = 2; i <= 9; i++) total += y[i] - x[i]
    idle = (y[5] - x[5]) + (y[6] - x[6])
    printf "%d", (total > 0 ? 100 * (total - idle) / total : 0) }'
}

# Every benchmark busy-polls both cores, so other work (a build, another
# benchmark) distorts it: wait up to $1 seconds for the machine to settle.
# Prints the final busy percentage, which steps.tsv records per step.
wait_for_quiet() {
  local limit=$1 waited=0 busy
  busy=$(cpu_busy_pct)
  while [ "$busy" -gt 15 ] && [ "$waited" -lt "$limit" ]; do
    echo "run.sh: CPUs ${busy}% busy with other work; waiting (${waited}/${limit} s)" >&2
    sleep 2
    waited=$((waited + 3))
    busy=$(cpu_busy_pct)
  done
  [ "$busy" -gt 15 ] && echo "run.sh: WARNING: measuring on a busy machine (${busy}% busy)" >&2
  echo "$busy"
}

# The command line as a shell would take it back: quotes only where needed.
shell_words() {
  local arg words=()
  for arg in "$@"; do
    if [[ "$arg" =~ ^[A-Za-z0-9_./,=:+@%-]+$ ]]; then words+=("$arg"); else words+=("$(printf '%q' "$arg")"); fi
  done
  printf '%s' "${words[*]}"
}

header() { printf '\n===== %s =====\n' "$*"; }

# tsv field: no tabs or newlines.
clean() { printf '%s' "$*" | tr '\t\n\r' '   ' | cut -c1-300; }

# The repetition a step id names: "a1_r2" -> 2; nothing for a step run once.
rep_of() { [[ "$1" =~ _r([0-9]+)$ ]] && printf '%s' "${BASH_REMATCH[1]}"; }

# record ID ROLE WORKLOAD LABEL STATUS RC ELAPSED OUTPUT REASON [BUSY_PCT [LOAD1]]
record() {
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$(clean "$4")" "$5" "$6" \
    "$7" "$8" "$(clean "$9")" "${10:-}" "$(rep_of "$1")" "${11:-}" >> "$steps"
}

# The reason a step failed, from its log: the last line that says so, else
# the last non-empty line.
failure_reason() {
  local log=$1 line
  line=$(grep -aiE 'error|fail|cannot|unable|not found|refused|abort|terminat|unanswered|what\(\)' "$log" \
           2>/dev/null | tail -n 1)
  [ -z "$line" ] && line=$(grep -av '^[[:space:]]*$' "$log" 2>/dev/null | tail -n 1)
  printf '%s' "$line"
}

# step ID ROLE WORKLOAD TIMEOUT_S OUTPUT LABEL -- COMMAND...
# OUTPUT is the JSON file (or, for the peer scripts, the directory) the
# command writes. Runs COMMAND under timeout, logs it to ID.log and records
# the outcome in steps.tsv.
step() {
  local id=$1 role=$2 workload=$3 limit=$4 output=$5 label=$6
  shift 7
  header "[$id] $label"
  printf '[%s] timeout -k 10 %s %s\n' "$id" "$limit" "$(shell_words "$@")" >> "$commands"
  echo "\$ $*"
  # A program or script of the repository that is missing (not built, or
  # not written yet) makes the step "not run" rather than failed.
  local arg
  for arg in "$@"; do
    if [[ "$arg" =~ ^(build|bench|scripts)/ ]] && [[ "$arg" != "$out"* ]] && [ ! -e "$arg" ]; then
      echo "not run: $arg does not exist"
      record "$id" "$role" "$workload" "$label" not_run - 0 "$output" "$arg does not exist"
      return 0
    fi
  done
  local log=$out/$id.log t0 t1 rc elapsed busy load1
  busy=$(wait_for_quiet "$step_wait_s")
  load1=$(cut -d' ' -f1 /proc/loadavg)
  echo "[$id] load average (1 min) $load1, CPUs ${busy}% busy with other work"
  t0=$(date +%s.%N)
  timeout -k 10 "$limit" "$@" > >(tee "$log") 2>&1
  rc=$?
  wait  # for tee
  t1=$(date +%s.%N)
  elapsed=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
  local status=ok reason=""
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    status=failed; reason="timed out after ${limit} s"
  elif [ "$rc" -ne 0 ]; then
    status=failed; reason="exit status $rc: $(failure_reason "$log")"
  elif [ -d "$output" ]; then
    compgen -G "$output/*.json" >/dev/null || { status=failed; reason="wrote no JSON file"; }
  elif [ ! -s "$output" ]; then
    status=failed; reason="exit status 0 but wrote no JSON file"
  fi
  [ "$status" = ok ] || echo "[$id] FAILED: $reason"
  echo "[$id] ${elapsed} s"
  record "$id" "$role" "$workload" "$label" "$status" "$rc" "$elapsed" "$output" "$reason" "$busy" "$load1"
}

# ---------------------------------------------------------------------------
header "setup: packages"
if [ "$do_install" -eq 1 ]; then
  bash scripts/install-deps.sh || echo "run.sh: scripts/install-deps.sh failed (continuing)"
  if [ -f bench/peers/install-peer-deps.sh ]; then
    bash bench/peers/install-peer-deps.sh || echo "run.sh: install-peer-deps.sh failed (continuing)"
  else
    echo "run.sh: bench/peers/install-peer-deps.sh not present, skipped"
  fi
  extra=()
  /usr/bin/python3 -c 'import matplotlib' 2>/dev/null || extra+=(python3-matplotlib)
  command -v valgrind >/dev/null || extra+=(valgrind)
  command -v fi_pingpong >/dev/null || extra+=(libfabric-bin)
  # Peers that install-peer-deps.sh installs too, should it be missing.
  command -v ucx_perftest >/dev/null || extra+=(ucx-utils)
  command -v sockperf >/dev/null || extra+=(sockperf)
  command -v iperf3 >/dev/null || extra+=(iperf3)
  command -v qperf >/dev/null || extra+=(qperf)
  if [ ${#extra[@]} -gt 0 ]; then
    echo "run.sh: installing ${extra[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${extra[@]}" ||
      echo "run.sh: apt-get install ${extra[*]} failed (continuing)"
  fi
else
  echo "skipped (--no-install)"
fi

header "setup: build"
build_status=skipped
if [ "$do_build" -eq 1 ]; then
  if [ ! -f "$build/build.ninja" ]; then
    echo "\$ meson setup $build --buildtype=release"
    meson setup "$build" --buildtype=release 2>&1 | tee "$out/build.log"
  else
    # New subdirs (peers, baselines) need the existing build to reconfigure,
    # which ninja does by itself.
    echo "run.sh: reusing the configured $build/"
  fi
  # Only the same-host section: its programs alone (a few minutes less on
  # a small machine than the whole tree).
  targets=()
  [ "$sections" = f ] && targets=(bench/librpc-latency bench/librpc-small-rpc-tput
                                  bench/librpc-large-rpc-tput src/librpc-fabric.so)
  echo "\$ ninja -C $build -k 0 ${targets[*]}"
  ninja -C "$build" -k 0 "${targets[@]}" 2>&1 | tee -a "$out/build.log" |
    grep -vE '^\[[0-9]+/[0-9]+\] ' | tail -n 40
  if [ "${PIPESTATUS[0]}" -eq 0 ]; then
    build_status=ok
  else
    build_status=failed
    echo "run.sh: the build FAILED; running whatever binaries exist (see $out/build.log)"
  fi
fi
record build setup - "build ($build, ninja -k 0${targets:+ ${targets[*]}})" "$build_status" - 0 "$out/build.log" \
  "$([ "$build_status" = failed ] && failure_reason "$out/build.log")"

header "setup: machine"
busy=$(wait_for_quiet "$quiet_wait_s")
# Machine, for the report.
{
  echo "cpu_busy_before_pct=$busy"
  echo "cpu_model=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
  echo "cores=$(nproc)"
  echo "kernel=$(uname -srm)"
  echo "date=$(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "os=$(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME")"
  echo "git=$(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "buildtype=$(meson introspect --buildoptions "$build" 2>/dev/null | /usr/bin/python3 -c \
    'import json,sys; o={x["name"]:x["value"] for x in json.load(sys.stdin)}; print(o["buildtype"], "-O"+str(o["optimization"]))' 2>/dev/null), LTO $(grep -q -- '-flto' "$build/build.ninja" 2>/dev/null && echo on || echo off)"
  echo "quick=$quick"
  echo "reps=$reps"
  echo "sections=$sections"
  echo "loadavg_start=$(cut -d' ' -f1-3 /proc/loadavg)"
} > "$out/machine.txt"
cat "$out/machine.txt"

# ---------------------------------------------------------------------------
# a. Latency, 32 B, one request outstanding, interleaved: every system once
# per repetition, the repetitions one after another.
if section a; then
for r in $(seq 1 "$reps"); do
  step "a1_r$r" lat32 latency 120 "$out/a1_raw_udp_r$r.json" "latency 32 B: raw UDP ping-pong (rep $r)" -- \
    "$bench/baselines/udp_pingpong" --size 32 --iters "$lat_iters" --warmup "$lat_warmup" \
    --json "$out/a1_raw_udp_r$r.json"
  step "a2_r$r" lat32 latency 120 "$out/a2_librpc_udp_r$r.json" "latency 32 B: librpc over udp (rep $r)" -- \
    "$bench/librpc-latency" --transport udp --sizes 32 --iters "$lat_iters" --warmup "$lat_warmup" \
    --json "$out/a2_librpc_udp_r$r.json"
  mkdir -p "$out/a8_sockperf_r$r" "$out/a4_fi_pingpong_r$r" "$out/a5_ucx_r$r"
  step "a8_r$r" lat32 latency 120 "$out/a8_sockperf_r$r" "latency 32 B: sockperf ping-pong, UDP, busy-poll (rep $r)" -- \
    env "${peer_env[@]}" bash bench/peers/sockperf.sh "$out/a8_sockperf_r$r"
  step "a9_r$r" lat32 latency 120 "$out/a9_librpc_fabric_shm_r$r.json" "latency 32 B: librpc over fabric shm (rep $r)" -- \
    "$bench/librpc-latency" --transport fabric --fabric-provider shm --sizes 32 --iters "$lat_iters" \
    --warmup "$lat_warmup" --json "$out/a9_librpc_fabric_shm_r$r.json"
  step "a4_r$r" lat32 latency 300 "$out/a4_fi_pingpong_r$r" "latency 32 B: libfabric fi_pingpong (udp, shm, tcp;ofi_rxm) (rep $r)" -- \
    env "${peer_env[@]}" bash bench/peers/fi_pingpong.sh "$out/a4_fi_pingpong_r$r"
  step "a5_r$r" lat32 latency 300 "$out/a5_ucx_r$r" "latency 32 B: UCX ucx_perftest (tcp, sm) (rep $r)" -- \
    env "${peer_env[@]}" WORKLOADS=latency bash bench/peers/ucx_perf.sh "$out/a5_ucx_r$r"
  step "a3_r$r" lat32 latency 180 "$out/a3_grpc_sync_r$r.json" "latency 32 B: gRPC sync unary (rep $r)" -- \
    "$bench/peers/grpc_echo" --api sync --size 32 --iters "$grpc_iters" --warmup "$grpc_warmup" \
    --json "$out/a3_grpc_sync_r$r.json"
done

# Latency vs size: librpc's sweep and raw UDP at the same sizes (a UDP
# datagram carries at most 65507 bytes, so raw UDP's last point is 65507 B).
step a6 sweep latency 300 "$out/a6_librpc_sweep.json" "latency vs size: librpc udp sweep 32 B..64 KiB" -- \
  "$bench/librpc-latency" --transport udp --sweep --iters "$sweep_iters" --warmup "$sweep_warmup" \
  --duration "$sweep_cap_s" --json "$out/a6_librpc_sweep.json"
for s in "${sweep_sizes[@]}"; do
  ds=$s; [ "$ds" -gt 65507 ] && ds=65507
  step "a7_$s" sweep latency 60 "$out/a7_raw_udp_$s.json" "latency vs size: raw UDP ping-pong $ds B" -- \
    "$bench/baselines/udp_pingpong" --size "$ds" --iters "$sweep_iters" --warmup "$sweep_warmup" \
    --json "$out/a7_raw_udp_$s.json"
done
fi  # section a

# ---------------------------------------------------------------------------
# b. Rate, 32 B requests, 1 client thread, 1 server thread.
rate_limit=$(awk -v d="$rate_s" 'BEGIN { printf "%d", d * 4 + 40 }')
if section b; then
for w in "${windows[@]}"; do
  step "b1_w$w" rate rate "$rate_limit" "$out/b1_raw_udp_w$w.json" "rate 32 B: raw UDP echo, window $w" -- \
    "$bench/baselines/udp_echo" --size 32 --window "$w" --duration "$rate_s" \
    --warmup-seconds "$rate_warmup_s" --json "$out/b1_raw_udp_w$w.json"
done
for w in "${windows[@]}"; do
  step "b2_w$w" rate rate "$rate_limit" "$out/b2_librpc_w$w.json" "rate 32 B: librpc small_rpc_tput over udp, window $w" -- \
    "$bench/librpc-small-rpc-tput" --transport udp --size 32 --window "$w" --duration "$rate_s" \
    --json "$out/b2_librpc_w$w.json"
done
grpc_limit=$(awk -v d="$rate_s" -v n="${#windows[@]}" 'BEGIN { printf "%d", (d + 1) * n * 3 + 60 }')
step b3 rate rate "$grpc_limit" "$out/b3_grpc_async.json" "rate 32 B: gRPC async unary, outstanding $(IFS=,; echo "${windows[*]}")" -- \
  "$bench/peers/grpc_echo" --api async --size 32 --outstanding "$(IFS=,; echo "${windows[*]}")" \
  --duration "$rate_s" --warmup-s "$rate_warmup_s" --json "$out/b3_grpc_async.json"
mkdir -p "$out/b4_ucx"
step b4 rate rate 300 "$out/b4_ucx" "rate 32 B: UCX ucx_perftest one-way message rate (tcp, sm)" -- \
  env "${peer_env[@]}" WORKLOADS=rate bash bench/peers/ucx_perf.sh "$out/b4_ucx"
fi  # section b

# ---------------------------------------------------------------------------
# c. Goodput, interleaved like the latency section. librpc over udp sweeps
# the sizes (the plot); the other librpc runs and the peers measure the
# 8 MiB of the targets (the kernel TCP tools: a byte stream, no messages).
large_limit=$(awk -v d="$large_s" 'BEGIN { printf "%d", d * 12 * 3 + 60 }')
one_limit=$(awk -v d="$large_s" 'BEGIN { printf "%d", d * 3 + 60 }')
if section c; then
for r in $(seq 1 "$reps"); do
  step "c1_r$r" goodput goodput "$rate_limit" "$out/c1_raw_udp_stream_r$r.json" "goodput: raw UDP stream, 1472 B datagrams (rep $r)" -- \
    "$bench/baselines/udp_stream" --datagram-size 1472 --duration "$stream_s" \
    --warmup-seconds "$rate_warmup_s" --json "$out/c1_raw_udp_stream_r$r.json"
  step "c2_r$r" goodput goodput "$large_limit" "$out/c2_librpc_large_r$r.json" "goodput: librpc large_rpc_tput over udp (GSO/GRO, the default), 4 KiB..8 MiB (rep $r)" -- \
    "$bench/librpc-large-rpc-tput" --transport udp --sizes "$large_sizes" --duration "$large_s" \
    --json "$out/c2_librpc_large_r$r.json"
  step "c3_r$r" goodput goodput "$rate_limit" "$out/c3_raw_udp_stream_offload_r$r.json" "goodput: raw UDP stream with GSO/GRO (--offload on), 1472 B datagrams (rep $r)" -- \
    "$bench/baselines/udp_stream" --datagram-size 1472 --offload on --duration "$stream_s" \
    --warmup-seconds "$rate_warmup_s" --json "$out/c3_raw_udp_stream_offload_r$r.json"
  step "c4_r$r" goodput goodput "$one_limit" "$out/c4_librpc_udp_no_offload_r$r.json" "goodput: librpc over udp, --udp-offload off, 8 MiB (rep $r)" -- \
    "$bench/librpc-large-rpc-tput" --transport udp --udp-offload off --sizes "$goodput_size" \
    --duration "$large_s" --json "$out/c4_librpc_udp_no_offload_r$r.json"
  step "c5_r$r" goodput goodput "$one_limit" "$out/c5_librpc_fabric_shm_r$r.json" "goodput: librpc over fabric shm, 8 MiB (rep $r)" -- \
    "$bench/librpc-large-rpc-tput" --transport fabric --fabric-provider shm --sizes "$goodput_size" \
    --duration "$large_s" --json "$out/c5_librpc_fabric_shm_r$r.json"
  mkdir -p "$out/c6_ucx_r$r" "$out/c8_iperf3_r$r" "$out/c9_qperf_r$r"
  step "c6_r$r" goodput goodput 300 "$out/c6_ucx_r$r" "goodput: UCX ucx_perftest ucp_am_bw 8 MiB (tcp, sm) (rep $r)" -- \
    env "${peer_env[@]}" WORKLOADS=goodput bash bench/peers/ucx_perf.sh "$out/c6_ucx_r$r"
  step "c7_r$r" goodput goodput "$one_limit" "$out/c7_librpc_fabric_tcp_r$r.json" "goodput: librpc over fabric tcp;ofi_rxm, 8 MiB (rep $r)" -- \
    "$bench/librpc-large-rpc-tput" --transport fabric --fabric-provider 'tcp;ofi_rxm' --sizes "$goodput_size" \
    --duration "$large_s" --json "$out/c7_librpc_fabric_tcp_r$r.json"
  step "c8_r$r" goodput goodput 120 "$out/c8_iperf3_r$r" "goodput: kernel TCP, iperf3 (rep $r)" -- \
    env "${peer_env[@]}" bash bench/peers/iperf3.sh "$out/c8_iperf3_r$r"
  step "c9_r$r" goodput goodput 120 "$out/c9_qperf_r$r" "goodput: kernel TCP, qperf tcp_bw (rep $r)" -- \
    env "${peer_env[@]}" bash bench/peers/qperf.sh "$out/c9_qperf_r$r"
  # The stream keeps 256 datagrams in flight; librpc at the same window.
  step "c10_r$r" goodput goodput "$one_limit" "$out/c10_librpc_udp_credits256_r$r.json" "goodput: librpc over udp, --credits 256 (the raw stream's window), 8 MiB (rep $r)" -- \
    "$bench/librpc-large-rpc-tput" --transport udp --credits 256 --sizes "$goodput_size" \
    --duration "$large_s" --json "$out/c10_librpc_udp_credits256_r$r.json"
done
fi  # section c

# ---------------------------------------------------------------------------
# e. Spurious retransmissions: one long 8 MiB run over fabric shm, a
# transport that cannot lose a packet, so every retransmission is a timer
# that fired too early (target: none in 10 s on an idle machine).
soak_s=10
[ "$quick" -eq 1 ] && soak_s=1
section e &&
step e1 soak soak 120 "$out/e1_librpc_fabric_shm_soak.json" "spurious retransmissions: librpc over fabric shm, 8 MiB for ${soak_s} s" -- \
  "$bench/librpc-large-rpc-tput" --transport fabric --fabric-provider shm --sizes "$goodput_size" \
  --duration "$soak_s" --json "$out/e1_librpc_fabric_shm_soak.json"

# ---------------------------------------------------------------------------
# d. CPU cost.
# One run per continuation style: function pointer (the target), closure
# and coroutine (within 10% of it, counting the program's inline code too).
if section d; then
step d1 cpu cpu 600 "$out/d1_cpu_cost.json" "CPU cost: instructions per 32-byte RPC (callgrind)" -- \
  env JSON="$out/d1_cpu_cost.json" N1="$cpu_n1" N2="$cpu_n2" bash scripts/cpu_cost.sh "$build" 32
step d2 cpu cpu 600 "$out/d2_cpu_cost_closure.json" "CPU cost: instructions per 32-byte RPC, closure continuations (callgrind)" -- \
  env JSON="$out/d2_cpu_cost_closure.json" API=closure N1="$cpu_n1" N2="$cpu_n2" bash scripts/cpu_cost.sh "$build" 32
step d3 cpu cpu 600 "$out/d3_cpu_cost_coro.json" "CPU cost: instructions per 32-byte RPC, coroutine continuations (callgrind)" -- \
  env JSON="$out/d3_cpu_cost_coro.json" API=coro N1="$cpu_n1" N2="$cpu_n2" bash scripts/cpu_cost.sh "$build" 32
fi  # section d

# ---------------------------------------------------------------------------
# f. Same host: librpc's samehost transport next to UCX's shared memory
# (UCX_TLS=sm) and libfabric's shm provider under librpc, interleaved like
# sections a and c (per repetition: latency A B C, rate A B C, goodput A B
# C ...). Every librpc run is two processes, server on CPU 1 and client on
# CPU 0 (bench/compare/pair.sh), as ucx_perftest runs. The 8 MiB goodput
# runs twice per transport: as is (the handler reads 4 bytes of the
# request) and with --server-reads-all (it checksums every byte), the
# figure the UCX target compares. Then one long samehost 8 MiB run for the
# retransmission target (none in 10 s).
if section f; then
pair=(bash bench/compare/pair.sh)
sh_rate_limit=$(awk -v d="$rate_s" 'BEGIN { printf "%d", d * 4 + 60 }')
sh_large_limit=$(awk -v d="$large_s" 'BEGIN { printf "%d", d * 3 + 60 }')
for r in $(seq 1 "$reps"); do
  step "f1_r$r" samehost latency 120 "$out/f1_librpc_samehost_lat_r$r.json" "same host, latency 32 B: librpc samehost, two processes (rep $r)" -- \
    "${pair[@]}" "$bench/librpc-latency" --transport samehost -- --sizes 32 --iters "$lat_iters" \
    --warmup "$lat_warmup" --json "$out/f1_librpc_samehost_lat_r$r.json"
  mkdir -p "$out/f2_ucx_sm_lat_r$r" "$out/f5_ucx_sm_rate_r$r" "$out/f9_ucx_sm_goodput_r$r"
  step "f2_r$r" samehost latency 300 "$out/f2_ucx_sm_lat_r$r" "same host, latency 32 B: UCX sm ucp_am_lat (rep $r)" -- \
    env "${peer_env[@]}" TRANSPORTS=shm WORKLOADS=latency bash bench/peers/ucx_perf.sh "$out/f2_ucx_sm_lat_r$r"
  step "f3_r$r" samehost latency 120 "$out/f3_librpc_fabric_shm_lat_r$r.json" "same host, latency 32 B: librpc fabric shm, two processes (rep $r)" -- \
    "${pair[@]}" "$bench/librpc-latency" --transport fabric --fabric-provider shm -- --sizes 32 \
    --iters "$lat_iters" --warmup "$lat_warmup" --json "$out/f3_librpc_fabric_shm_lat_r$r.json"

  step "f4_r$r" samehost rate "$sh_rate_limit" "$out/f4_librpc_samehost_rate_r$r.json" "same host, rate 32 B: librpc samehost small_rpc_tput, window 32, two processes (rep $r)" -- \
    "${pair[@]}" "$bench/librpc-small-rpc-tput" --transport samehost -- --size 32 --window 32 \
    --duration "$rate_s" --json "$out/f4_librpc_samehost_rate_r$r.json"
  step "f5_r$r" samehost rate 300 "$out/f5_ucx_sm_rate_r$r" "same host, rate 32 B: UCX sm ucp_am_bw one-way message rate (rep $r)" -- \
    env "${peer_env[@]}" TRANSPORTS=shm WORKLOADS=rate bash bench/peers/ucx_perf.sh "$out/f5_ucx_sm_rate_r$r"
  step "f6_r$r" samehost rate "$sh_rate_limit" "$out/f6_librpc_fabric_shm_rate_r$r.json" "same host, rate 32 B: librpc fabric shm small_rpc_tput, window 32, two processes (rep $r)" -- \
    "${pair[@]}" "$bench/librpc-small-rpc-tput" --transport fabric --fabric-provider shm -- --size 32 \
    --window 32 --duration "$rate_s" --json "$out/f6_librpc_fabric_shm_rate_r$r.json"

  step "f7_r$r" samehost goodput "$sh_large_limit" "$out/f7_librpc_samehost_goodput_r$r.json" "same host, goodput 8 MiB: librpc samehost, two processes (rep $r)" -- \
    "${pair[@]}" "$bench/librpc-large-rpc-tput" --transport samehost -- --sizes "$goodput_size" \
    --duration "$large_s" --json "$out/f7_librpc_samehost_goodput_r$r.json"
  step "f8_r$r" samehost goodput "$sh_large_limit" "$out/f8_librpc_samehost_reads_all_r$r.json" "same host, goodput 8 MiB: librpc samehost, server reads every byte, two processes (rep $r)" -- \
    "${pair[@]}" "$bench/librpc-large-rpc-tput" --transport samehost -- --sizes "$goodput_size" \
    --server-reads-all --duration "$large_s" --json "$out/f8_librpc_samehost_reads_all_r$r.json"
  step "f9_r$r" samehost goodput 300 "$out/f9_ucx_sm_goodput_r$r" "same host, goodput 8 MiB: UCX sm ucp_am_bw (rep $r)" -- \
    env "${peer_env[@]}" TRANSPORTS=shm WORKLOADS=goodput bash bench/peers/ucx_perf.sh "$out/f9_ucx_sm_goodput_r$r"
  step "f10_r$r" samehost goodput "$sh_large_limit" "$out/f10_librpc_fabric_shm_goodput_r$r.json" "same host, goodput 8 MiB: librpc fabric shm, two processes (rep $r)" -- \
    "${pair[@]}" "$bench/librpc-large-rpc-tput" --transport fabric --fabric-provider shm -- \
    --sizes "$goodput_size" --duration "$large_s" --json "$out/f10_librpc_fabric_shm_goodput_r$r.json"
  step "f11_r$r" samehost goodput "$sh_large_limit" "$out/f11_librpc_fabric_shm_reads_all_r$r.json" "same host, goodput 8 MiB: librpc fabric shm, server reads every byte, two processes (rep $r)" -- \
    "${pair[@]}" "$bench/librpc-large-rpc-tput" --transport fabric --fabric-provider shm -- \
    --sizes "$goodput_size" --server-reads-all --duration "$large_s" \
    --json "$out/f11_librpc_fabric_shm_reads_all_r$r.json"

  # Application memory (issue 30): the server answers 1 MiB reads from a
  # 32 MiB pool, copied into MsgBuffers or sent as views of the pool
  # registered with the Rpc; the same pool, interleaved.
  step "f13_r$r" samehost goodput "$sh_large_limit" "$out/f13_librpc_samehost_pool_copy_r$r.json" "same host, 1 MiB reads from a pool, copied into message buffers: librpc samehost, two processes (rep $r)" -- \
    "${pair[@]}" "$bench/librpc-large-rpc-tput" --transport samehost -- --sizes 64 --resp-size 1M \
    --pool-reads --duration "$large_s" --json "$out/f13_librpc_samehost_pool_copy_r$r.json"
  step "f14_r$r" samehost goodput "$sh_large_limit" "$out/f14_librpc_samehost_app_memory_r$r.json" "same host, 1 MiB reads from a pool registered as application memory (views, no copy): librpc samehost, two processes (rep $r)" -- \
    "${pair[@]}" "$bench/librpc-large-rpc-tput" --transport samehost -- --sizes 64 --resp-size 1M \
    --app-memory --duration "$large_s" --json "$out/f14_librpc_samehost_app_memory_r$r.json"
done
step f12 samehost_soak soak 120 "$out/f12_librpc_samehost_soak.json" "same host, retransmissions: librpc samehost, 8 MiB for ${soak_s} s, server reads every byte, two processes" -- \
  "${pair[@]}" "$bench/librpc-large-rpc-tput" --transport samehost -- --sizes "$goodput_size" \
  --server-reads-all --duration "$soak_s" --json "$out/f12_librpc_samehost_soak.json"
fi  # section f

echo "loadavg_end=$(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/machine.txt"

# ---------------------------------------------------------------------------
header "report"
py=/usr/bin/python3
[ -x "$py" ] || py=python3
# A run of some sections only leaves docs/ alone: its report goes next to
# its results.
report_args=() report_md=docs/benchmarks.md
if [ "$all_sections" -eq 0 ]; then
  report_md=$out/benchmarks.md
  report_args=(--md "$report_md" --png-dir "$out/benchmarks")
fi
echo "\$ $py bench/compare/report.py $out ${report_args[*]}"
"$py" bench/compare/report.py "$out" "${report_args[@]}" || { echo "run.sh: report.py failed" >&2; exit 1; }
echo
echo "run.sh: $(( $(date +%s) - run_start )) s; results in $out; report in $report_md"
column -t -s $'\t' "$steps" 2>/dev/null | cut -c1-160 || cat "$steps"
