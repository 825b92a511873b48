#!/usr/bin/env bash
# librpc over verbs (RC READ, and multi-packet UD) against perftest's
# ib_read_bw / ib_read_lat on the same RDMA device. Run inside the Soft-RoCE
# VM (as root): bash scripts/rxe-vm.sh -- bash bench/peers/rc_read_vs_perftest.sh build/bench
# Interleaved A B C, REPS times; prints every run, then the medians are
# read off by hand (docs/transports.md).
set -u
bench=${1:?usage: rc_read_vs_perftest.sh BENCH_DIR [REPS] [DEVICE]}
reps=${2:-3}
dev=${3:-rxe0}
slow="--sm-timeout-ms 20000 --failure-timeout-ms 20000"
for rep in $(seq 1 "$reps"); do
  echo "=== rep $rep"
  echo "--- A: librpc RC READ, 8 MiB"
  "$bench/librpc-large-rpc-tput" $slow --transport verbs --sizes 8M --duration 3 2>&1 | grep -v "^librpc \(info\|warn\)"
  echo "--- B: librpc multi-packet UD, 8 MiB"
  "$bench/librpc-large-rpc-tput" $slow --transport verbs --sizes 8M --duration 3 \
    --bulk-threshold 1099511627776 2>&1 | grep -v "^librpc \(info\|warn\)"
  echo "--- C: ib_read_bw, 8 MiB"
  ib_read_bw -d "$dev" -s 8388608 -n 50 > /tmp/ibbw_server.log 2>&1 &
  sleep 1
  ib_read_bw -d "$dev" -s 8388608 -n 50 127.0.0.1 2>&1 | tail -3
  wait
  echo "--- D: librpc latency, 64 KiB (RC READ both ways)"
  "$bench/librpc-latency" $slow --transport verbs --sizes 64K --iters 2000 --warmup 200 2>&1 | grep -v "^librpc \(info\|warn\)"
  echo "--- E: ib_read_lat, 64 KiB"
  ib_read_lat -d "$dev" -s 65536 -n 1000 > /tmp/iblat_server.log 2>&1 &
  sleep 1
  ib_read_lat -d "$dev" -s 65536 -n 1000 127.0.0.1 2>&1 | tail -3
  wait
done
