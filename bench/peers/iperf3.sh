#!/usr/bin/env bash
# iperf3 peer: kernel TCP goodput over loopback, next to the raw UDP stream
# (bench/baselines/udp_stream) and librpc's large_rpc_tput. Runs the packaged
# iperf3, a one-off server (-s -1) in the background and a client to
# 127.0.0.1, one TCP stream of iperf3's default 128 KiB writes, and writes one
# bench/compare/SCHEMA.md goodput file:
#
#   OUTDIR/iperf3_tcp.json   gbps = what the receiver got, over the measured time
#
# iperf3 omits the first OMIT_S seconds (slow start; -O) and then measures
# DURATION_S seconds (-t). Its JSON output (-J) is read with python3: the
# receiver's byte count and seconds (end.sum_received), the sender's
# retransmissions. Output that lacks them, or carries iperf3's "error", fails
# the run. The client's JSON and the server's log are kept in OUTDIR/logs.
#
# Usage: bench/peers/iperf3.sh OUTDIR
# Env:   IPERF3_PORT    the server's TCP port (47630)
#        DURATION_S     measured seconds (5), OMIT_S warmup seconds (1)
#        RUN_TIMEOUT_S  limit for each iperf3 process (60)
#        NO_PIN=1       do not pin (default: server on CPU 1, client on CPU 0, iperf3 -A)
set -euo pipefail

prog=iperf3.sh
. "$(dirname "${BASH_SOURCE[0]}")/peer_lib.sh"
. "$(dirname "${BASH_SOURCE[0]}")/result_lib.sh"
peer_outdir "$@"


port=${IPERF3_PORT:-47630}
duration=${DURATION_S:-5}
omit=${OMIT_S:-1}
run_timeout=${RUN_TIMEOUT_S:-60}
require_uints port duration omit run_timeout
((duration > 0)) || die "DURATION_S must be positive"

command -v iperf3 >/dev/null || die "iperf3 not found (install iperf3: bench/peers/install-peer-deps.sh)"
command -v ss >/dev/null || die "ss not found (install iproute2)"
py=/usr/bin/python3
[[ -x $py ]] || py=python3
command -v "$py" >/dev/null || die "python3 not found"

server_pin=() client_pin=() placement="two processes over 127.0.0.1, not pinned"
if [[ ${NO_PIN:-0} != 1 ]] && taskset -c 0,1 true 2>/dev/null; then
  server_pin=(-A 1) client_pin=(-A 0)
  placement="two processes over 127.0.0.1, server pinned to CPU 1 and client to CPU 0 (iperf3 -A)"
fi

slog=$outdir/logs/iperf3_tcp.server.log
cjson=$outdir/logs/iperf3_tcp.client.json

if port_busy t "$port"; then
  die "TCP port $port is already in use; choose another with IPERF3_PORT"
fi
server_args=(-s -1 -p "$port" "${server_pin[@]}")
client_args=(-c 127.0.0.1 -p "$port" "${client_pin[@]}" -t "$duration" -O "$omit" -J)
echo "$prog: iperf3 ${server_args[*]} & iperf3 ${client_args[*]}"
result_start "${client_args[@]}"
start_server t "$port" "$slog" timeout "$run_timeout" iperf3 "${server_args[@]}"
run_client "$run_timeout" "$cjson" iperf3 "${client_args[@]}"
rc=0
wait "$server_pid" || rc=$?
server_pid=""
((rc == 0)) || die "server failed (exit $rc); see $slog"

# The schema file, from iperf3's JSON; python3 fails loudly on anything missing.
"$py" - "$cjson" "$outdir/iperf3_tcp.json" "$placement" "iperf3 ${client_args[*]}" <<'EOF' ||
import json, sys
src, dst, placement, command = sys.argv[1:5]
try:
    with open(src) as f:
        doc = json.load(f)
except (OSError, ValueError) as e:
    sys.exit(f"iperf3.sh: error: {src} is not iperf3's JSON output: {e}")
if doc.get("error"):
    sys.exit(f"iperf3.sh: error: iperf3 reported: {doc['error']}")
try:
    start, end = doc["start"], doc["end"]
    recv = end["sum_received"]
    seconds, nbytes = float(recv["seconds"]), int(recv["bytes"])
    blksize = int(start["test_start"]["blksize"])
    omit = start["test_start"].get("omit", 0)
    version = start.get("version", "iperf3")
    retransmits = end.get("sum_sent", {}).get("retransmits")
except (KeyError, TypeError, ValueError) as e:
    sys.exit(f"iperf3.sh: error: iperf3's JSON lacks {e} (format not recognised); see {src}")
if seconds <= 0 or nbytes <= 0:
    sys.exit(f"iperf3.sh: error: iperf3 moved {nbytes} bytes in {seconds} s; see {src}")
gbps = nbytes * 8 / seconds / 1e9
setup = (f"{version}, {command}; one-off server iperf3 -s -1; {placement}; one TCP stream "
         f"over loopback, {blksize} B writes, default socket buffers; first {omit} s omitted "
         f"(slow start), then {seconds:.2f} s measured; gbps = bytes the receiver got / "
         f"seconds; sender retransmissions: {retransmits}")
out = {"system": "iperf3", "transport": "tcp", "workload": "goodput", "setup": setup,
       "results": [{"size": blksize, "duration_s": round(seconds, 3), "bytes": nbytes,
                    "gbps": round(gbps, 3), "retransmits": retransmits}]}
with open(dst, "w") as f:
    json.dump(out, f)
    f.write("\n")
print(f"iperf3.sh: tcp stream: {gbps:.2f} Gbit/s ({nbytes} B in {seconds:.2f} s)")
EOF
  die "could not turn $cjson into $outdir/iperf3_tcp.json"
result_wrap "$outdir/iperf3_tcp.json" "{\"client\":$(json_str "iperf3 ${client_args[*]}")}" 2 ||
  die "cannot write $outdir/iperf3_tcp.json"
