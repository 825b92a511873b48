#!/usr/bin/env bash
# sockperf peer: the kernel UDP ping-pong as a tuned tool measures it, next to
# the raw bench/baselines/udp_pingpong. Runs the packaged sockperf, server
# (`sockperf sr`) in the background and client (`sockperf pp`) to 127.0.0.1,
# UDP, 32-byte messages, and writes one bench/compare/SCHEMA.md latency file:
#
#   OUTDIR/sockperf_udp.json   rtt p50/p90/p99/p99.9/p99.99/max (round trips)
#
# Both sides busy-poll: --nonblocked sockets make sockperf's recvfrom() loop
# spin on EAGAIN instead of sleeping in the kernel (as udp_pingpong and
# librpc's udp transport do). --full-rtt makes sockperf report round trips
# (not half of them), --mps=max sends the next ping as soon as the pong is in.
# sockperf times every round trip with the TSC; it warms up for 400 ms and
# then sleeps 2 s before measuring, so a run takes DURATION_S + ~3 s.
# sockperf's percentiles are nearest-rank over the measured round trips. The
# client's full output is kept in OUTDIR/logs; a summary that does not look
# as expected fails the run rather than guessing.
#
# Usage: bench/peers/sockperf.sh OUTDIR
# Env:   SOCKPERF_PORT  UDP port of the server (47610)
#        DURATION_S     measured seconds (5)
#        SIZE           message bytes (32; sockperf's minimum is 14)
#        RUN_TIMEOUT_S  limit for the client (60)
#        NO_PIN=1       do not pin (default: server on CPU 1, client on CPU 0)
set -euo pipefail

prog=sockperf.sh
. "$(dirname "${BASH_SOURCE[0]}")/peer_lib.sh"
. "$(dirname "${BASH_SOURCE[0]}")/result_lib.sh"
peer_outdir "$@"


port=${SOCKPERF_PORT:-47610}
duration=${DURATION_S:-5}
size=${SIZE:-32}
run_timeout=${RUN_TIMEOUT_S:-60}
require_uints port duration size run_timeout
((duration > 0)) || die "DURATION_S must be positive"
((size >= 14)) || die "SIZE must be at least 14 (sockperf's header)"

command -v sockperf >/dev/null || die "sockperf not found (install sockperf: bench/peers/install-peer-deps.sh)"
command -v ss >/dev/null || die "ss not found (install iproute2)"
version=$(sockperf --version 2>&1 | sed -n 's/^sockperf, version //p' | head -n1)
version=${version:-unknown}

peer_pinning
slog=$outdir/logs/sockperf_udp.server.log
clog=$outdir/logs/sockperf_udp.client.log

if port_busy u "$port"; then
  die "UDP port $port is already in use; choose another with SOCKPERF_PORT"
fi
server_args=(sr -i 127.0.0.1 -p "$port" --nonblocked)
client_args=(pp -i 127.0.0.1 -p "$port" -m "$size" -t "$duration" --mps=max --nonblocked --full-rtt)
echo "$prog: sockperf ${server_args[*]} & sockperf ${client_args[*]}"
result_start "$@"
start_server u "$port" "$slog" "${server_pin[@]}" sockperf "${server_args[@]}"
run_client "$run_timeout" "$clog" "${client_pin[@]}" sockperf "${client_args[@]}"
kill -0 "$server_pid" 2>/dev/null || die "server died during the run; see $slog"
peer_cleanup

# The summary, without sockperf's colour escapes:
#   sockperf: [Valid Duration] RunTime=3.532 sec; SentMessages=19631; ReceivedMessages=19631
#   sockperf: ====> avg-rtt=179.888 (std-dev=1856.892)
#   sockperf: # dropped messages = 0; # duplicated messages = 0; # out-of-order messages = 0
#   sockperf: Total 19631 observations; each percentile contains 196.31 observations
#   sockperf: ---> <MAX> observation = 40009.355
#   sockperf: ---> percentile 99.900 = 24027.277   (also 99.999 .. 25.000)
text=$(sed 's/\x1b\[[0-9;]*m//g' "$clog")
grab() {  # grab SED_EXPRESSION WHAT: the one value it extracts, or die
  local v
  v=$(sed -n "$1" <<<"$text" | head -n1)
  [[ $v =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "no $2 in sockperf's output (format not recognised); see $clog"
  printf '%s' "$v"
}
pct() { grab "s/^sockperf: ---> percentile *$1 = *\([0-9.]*\) *$/\1/p" "percentile $1"; }
observations=$(grab 's/^sockperf: Total \([0-9]*\) observations.*/\1/p' "observation count")
avg=$(grab 's/^sockperf: ====> avg-rtt=\([0-9.]*\) .*/\1/p' "avg-rtt (round trips, --full-rtt)")
runtime=$(grab 's/^sockperf: \[Valid Duration\] RunTime=\([0-9.]*\) sec.*/\1/p' "valid-duration run time")
dropped=$(grab 's/^sockperf: # dropped messages = \([0-9]*\);.*/\1/p' "dropped-message count")
max=$(grab 's/^sockperf: ---> <MAX> observation = *\([0-9.]*\) *$/\1/p' "maximum")
p50=$(pct 50.000) p90=$(pct 90.000) p99=$(pct 99.000) p999=$(pct 99.900) p9999=$(pct 99.990)
((observations > 0)) || die "sockperf measured no round trips; see $clog"

setup="sockperf $version, server: sockperf ${server_args[*]}; client: sockperf ${client_args[*]}; $placement; both busy-poll (non-blocking recvfrom); sockperf's 400 ms warmup and 2 s pause excluded; $observations round trips in $runtime s, all timed (TSC), $dropped dropped; percentiles as sockperf prints them (nearest rank); mean round trip $avg us"
{
  result_head sockperf udp latency "$setup" \
    "{\"server\":$(json_str "sockperf ${server_args[*]}"),\"client\":$(json_str "sockperf ${client_args[*]}")}" 2
  printf '[{"size":%d,"iters":%d,"rtt_p50_us":%s,"rtt_p90_us":%s,"rtt_p99_us":%s,"rtt_p999_us":%s,"rtt_p9999_us":%s,"rtt_max_us":%s,"rtt_mean_us":%s,"dropped":%d}]}\n' \
    "$size" "$observations" "$p50" "$p90" "$p99" "$p999" "$p9999" "$max" "$avg" "$dropped"
} >"$outdir/sockperf_udp.json" || die "cannot write $outdir/sockperf_udp.json"
echo "$prog: udp $size B: rtt p50 $p50 us, rtt p99 $p99 us, rtt p99.99 $p9999 us ($observations round trips, $dropped dropped)"
