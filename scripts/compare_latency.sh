#!/usr/bin/env bash
# Compares librpc's round-trip latency with the raw UDP busy-poll ping-pong
# baseline, same method (32 B, one outstanding request, server thread on
# CPU 1, client on CPU 0, over 127.0.0.1), and prints one line:
#
#   p50 32 B: librpc 9.1 us, raw UDP 7.0 us, ratio 1.30
#
# Usage: scripts/compare_latency.sh [BUILD_DIR]     (default: build)
# Env:   ITERS   measured round trips for each program (default 200000)
#        WARMUP  unmeasured round trips before (default: each program's own)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${1:-build}
[[ $build_dir = /* ]] || build_dir="$root/$build_dir"
iters=${ITERS:-200000}
size=32

if ! [[ $iters =~ ^[1-9][0-9]*$ ]]; then
  echo "compare_latency: ITERS must be a positive integer, got '$iters'" >&2
  exit 2
fi
warmup_args=()
if [[ -n ${WARMUP:-} ]]; then
  if ! [[ $WARMUP =~ ^[0-9]+$ ]]; then
    echo "compare_latency: WARMUP must be a non-negative integer, got '$WARMUP'" >&2
    exit 2
  fi
  warmup_args=(--warmup "$WARMUP")
fi

# Build if needed (configuring the build dir first if it does not exist).
if [[ ! -f $build_dir/build.ninja ]]; then
  meson setup "$build_dir" "$root"
fi
ninja -C "$build_dir" bench/baselines/udp_pingpong bench/librpc-latency >/dev/null

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "== raw UDP: udp_pingpong --size $size --iters $iters ${warmup_args[*]}"
"$build_dir/bench/baselines/udp_pingpong" --size "$size" --iters "$iters" "${warmup_args[@]}" \
  --json "$tmp/raw.json"
echo "== librpc: latency --sizes $size --iters $iters ${warmup_args[*]}"
"$build_dir/bench/librpc-latency" --sizes "$size" --iters "$iters" "${warmup_args[@]}" \
  --json "$tmp/librpc.json"

python3 - "$tmp/librpc.json" "$tmp/raw.json" "$size" <<'EOF'
import json, sys
librpc_path, raw_path, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
with open(librpc_path) as f:
    librpc = json.load(f)
with open(raw_path) as f:
    raw = json.load(f)
# Schema 2 names the median rtt_p50_us; older librpc files say p50_us.
def p50(row):
    return row["rtt_p50_us"] if "rtt_p50_us" in row else row["p50_us"]
rows = [r for r in librpc["results"] if r["size"] == size]
if not rows:
    sys.exit(f"compare_latency: no {size} B result in {librpc_path}")
raw_row = raw["results"][0]
if raw_row["size"] != size:
    sys.exit(f"compare_latency: raw UDP result is for {raw_row['size']} B, not {size} B")
a, b = p50(rows[0]), p50(raw_row)
print(f"p50 {size} B: librpc {a:.1f} us, raw UDP {b:.1f} us, ratio {a / b:.2f}")
for w in raw.get("warnings", []):
    print(f"  raw UDP warning: {w}")
EOF
