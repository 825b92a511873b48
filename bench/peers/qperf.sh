#!/usr/bin/env bash
# qperf peer: kernel TCP goodput over loopback (qperf's tcp_bw), a second
# opinion next to iperf3. Runs the packaged qperf, its server in the
# background and `qperf 127.0.0.1 tcp_bw` as the client, one TCP stream of
# MSG_SIZE messages, and writes one bench/compare/SCHEMA.md goodput file:
#
#   OUTDIR/qperf_tcp.json   gbps from qperf's bw (decimal bytes/s: qperf
#                           writes MB and GB for 10^6 and 10^9, KiB for 2^10)
#
# qperf has no warmup option: the whole DURATION_S is measured, slow start
# included. -vv prints the byte and message counts next to bw, -e 6 gives
# six significant digits. A summary whose bw line is missing or in a unit
# this script does not know fails the run. The server runs until killed; the
# client's output is kept in OUTDIR/logs.
#
# Usage: bench/peers/qperf.sh OUTDIR
# Env:   QPERF_PORT     the server's listen (control) port (47640); the data
#                       connection uses the next one (-ip)
#        DURATION_S     seconds (5), MSG_SIZE (64K, qperf's default)
#        RUN_TIMEOUT_S  limit for the client (60)
#        NO_PIN=1       do not pin (default: server on CPU 1, client on CPU 0)
set -euo pipefail

prog=qperf.sh
. "$(dirname "${BASH_SOURCE[0]}")/peer_lib.sh"
. "$(dirname "${BASH_SOURCE[0]}")/result_lib.sh"
peer_outdir "$@"


port=${QPERF_PORT:-47640}
duration=${DURATION_S:-5}
msg_size=${MSG_SIZE:-64K}
run_timeout=${RUN_TIMEOUT_S:-60}
require_uints port duration run_timeout
((duration > 0)) || die "DURATION_S must be positive"
[[ $msg_size =~ ^[0-9]+[KM]?$ ]] || die "MSG_SIZE must be bytes with an optional K or M, got '$msg_size'"

command -v qperf >/dev/null || die "qperf not found (install qperf: bench/peers/install-peer-deps.sh)"
command -v ss >/dev/null || die "ss not found (install iproute2)"
version=$(qperf --version 2>&1 | head -n1)

peer_pinning
slog=$outdir/logs/qperf_tcp.server.log
clog=$outdir/logs/qperf_tcp.client.log

data_port=$((port + 1))
for p in "$port" "$data_port"; do
  if port_busy t "$p"; then die "TCP port $p is already in use; choose another with QPERF_PORT"; fi
done
client_args=(127.0.0.1 -lp "$port" -ip "$data_port" -t "$duration" -m "$msg_size" -e 6 -vv tcp_bw)
echo "$prog: qperf -lp $port & qperf ${client_args[*]}"
result_start "${client_args[@]}"
start_server t "$port" "$slog" "${server_pin[@]}" qperf -lp "$port"
run_client "$run_timeout" "$clog" "${client_pin[@]}" qperf "${client_args[@]}"
peer_cleanup

# tcp_bw:
#     bw              =  454.123 MB/sec
#     msg_size        =       64 KiB (65,536)
#     time            =        2 sec
#     recv_bytes      =  907.123 MB
grep -q '^tcp_bw:' "$clog" || die "no 'tcp_bw:' result in qperf's output (format not recognised); see $clog"
field() {  # field NAME: "VALUE UNIT" of the line "NAME = VALUE UNIT"
  sed -n "s/^ *$1 *= *\([0-9.,]*\) *\([A-Za-z/]*\).*/\1 \2/p" "$clog" | head -n1 | tr -d ,
}
read -r bw bw_unit <<<"$(field bw)" || true
read -r secs secs_unit <<<"$(field time)" || true
read -r recv recv_unit <<<"$(field recv_bytes)" || true
[[ ${bw:-} =~ ^[0-9.]+$ ]] || die "no bw line in qperf's output (format not recognised); see $clog"
[[ ${secs:-} =~ ^[0-9.]+$ && $secs_unit == sec ]] || die "no 'time = N sec' line in qperf's output; see $clog"
scale() {  # bytes per unit, or die
  case $1 in
    B|B/sec) echo 1 ;; KB|KB/sec) echo 1e3 ;; MB|MB/sec) echo 1e6 ;; GB|GB/sec) echo 1e9 ;;
    TB|TB/sec) echo 1e12 ;;
    *) die "unknown unit '$1' in qperf's output (format not recognised); see $clog" ;;
  esac
}
bw_scale=$(scale "$bw_unit")
recv_bytes=""
if [[ ${recv:-} =~ ^[0-9.]+$ ]]; then
  recv_scale=$(scale "$recv_unit")
  recv_bytes=$(awk -v v="$recv" -v s="$recv_scale" 'BEGIN { printf "%.0f", v * s }')
fi
gbps=$(awk -v v="$bw" -v s="$bw_scale" 'BEGIN { printf "%.3f", v * s * 8 / 1e9 }')
msg_bytes=$(awk -v m="$msg_size" 'BEGIN { n = m + 0; u = substr(m, length(m));
  printf "%d", u == "K" ? n * 1024 : u == "M" ? n * 1048576 : n }')

setup="$version, qperf ${client_args[*]}; server qperf -lp $port; $placement; one TCP stream over loopback, $msg_size messages, default socket buffers; no warmup, the whole $secs s measured (slow start included); gbps from qperf's bw = $bw $bw_unit (decimal units)"
printf '{"system":"qperf","transport":"tcp","workload":"goodput","setup":%s,"results":[{"size":%d,"duration_s":%s%s,"gbps":%s}]}\n' \
  "$(json_str "$setup")" "$msg_bytes" "$secs" "${recv_bytes:+,\"bytes\":$recv_bytes}" "$gbps" \
  >"$outdir/qperf_tcp.json" || die "cannot write $outdir/qperf_tcp.json"
result_wrap "$outdir/qperf_tcp.json" "{\"client\":$(json_str "qperf ${client_args[*]}")}" 2 ||
  die "cannot write $outdir/qperf_tcp.json"
echo "$prog: tcp_bw $msg_size: $bw $bw_unit = $gbps Gbit/s"
