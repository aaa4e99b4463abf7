#!/usr/bin/env bash
# bench/run.sh - tbrdma end to end against the kernel tools, on one simulated
# Thunderbolt link, in one run (issue 9).
#
# Builds two network namespaces joined by a veth pair (both ends named
# thunderbolt0, MTU 65520, 198.18.2.1/24 client <-> 198.18.2.2/24 server),
# measures iperf3 (UDP 65000 B, UDP 4096 B, TCP), sockperf (UDP 64 B
# ping-pong, blocking and busy-poll) and libfabric's fi_pingpong (tcp msg
# 1 MiB bandwidth; udp rdm = udp;ofi_rxd 64 B one-way latency) on it, then the
# tbrdma perftest commands (write-bw 64 KiB and 1 MiB, read-lat, write-lat,
# send-lat), then the loss section (issue 18: nftables drops 0.1, 1 and 5 % of
# the packets each namespace sends, then of those it receives, the same for
# iperf3 TCP and write-bw 64 KiB and 1 MiB; needs nft, Debian: nftables), and prints the issue's ratios with the raw figures as a table
# (stdout) and as JSON. Progress goes to stderr. Needs root (netns, veth),
# iperf3, sockperf, taskset, ss, python3 and Go (or TBRDMA_BIN); fi_pingpong
# (Debian: libfabric-bin) is optional: without it, or if it fails in every
# repetition, the two libfabric ratios use the anchors script's figures
# (3.58 GB/s, 22.9 us one-way) and the table says so.
#
#   sudo apt-get install iperf3 sockperf libfabric-bin iproute2 util-linux
#
#   sudo bench/run.sh                       # ~3-4 min; JSON in bench/results.json
#   BENCH_OUT=/tmp/r.json REPS=1 bench/run.sh
#
# Knobs (environment):
#   BENCH_OUT     JSON result file                 (default bench/results.json)
#   BENCH_LOGDIR  raw tool outputs                 (default a fresh /tmp/tbrdma-bench.*)
#   REPS          repetitions of every measurement (default 3; medians reported)
#   WB_SECS       target length of write-bw 1 MiB  (default 5 s; -n is derived
#                 from the 64 KiB run just before it)
#   LAT_ITERS     -n of the latency commands       (default 5000)
#   CPU_CLI/CPU_SRV  client / server core          (default 0 / 1)
#   QUIET_WAIT    wait at most this many seconds in all for the machine to be
#                 quiet (< QUIET_MAX % CPU busy) before each repetition (default 60)
#   TBRDMA_BIN    use this tbrdma binary instead of building one
#   TBRDMA_OLD_BIN  a second (older) tbrdma binary: its write-bw 1 MiB,
#                 read-lat and write-lat run too, beside the new ones, so that
#                 old and new ratios come from the same run (keys old_*)
#   FI_TCP_ITERS  -I of fi_pingpong tcp msg 1 MiB  (default 300, as the anchors)
#   FI_RXD_ITERS  -I of fi_pingpong udp rdm 64 B   (default 2000, as the anchors)
#   SKIP          any of: iperf sockperf libfabric tbrdma cabi engines stream serve qps loss
#   LOSS_ITERS    -n of the loss section's write-bw 64 KiB / 1 MiB (default 10000 / 600)
#   QPS_GIB       GiB each run of the qps section moves (default 4: at 1 GiB a run
#                 lasted a quarter of a second, shorter than this host's swings)
#   STREAM_BYTES  bytes of each stream/TCP io.Copy   (default 1 GiB)
#   BENCH_NS_A/_B, BENCH_VETH_A/_B  other namespace and temporary veth names
#                 (default tbbench-a/-b, tbbnchA/B), for two runs side by side
#   SUMMARY_ONLY=1 with BENCH_LOGDIR=<a previous run's log dir>: only print
#                 the table and write the JSON again
#
# Namespaces, addresses and ports are this script's own (tbbench-a/-b,
# 198.18.2.0/24), so it does not collide with the anchors script (tba/tbb,
# 198.18.1.0/24). On exit it kills the processes it started, by PID, and
# deletes its namespaces.
set -u -o pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
BENCH_OUT=${BENCH_OUT:-$HERE/results.json}
REPS=${REPS:-3}
WB_SECS=${WB_SECS:-5}
LAT_ITERS=${LAT_ITERS:-5000}
LOSS_ITERS=${LOSS_ITERS:-10000/600}
QPS_GIB=${QPS_GIB:-4}
CPU_CLI=${CPU_CLI:-0}
CPU_SRV=${CPU_SRV:-1}
QUIET_WAIT=${QUIET_WAIT:-60}
QUIET_MAX=${QUIET_MAX:-15}
SKIP=${SKIP:-}
NS_A=${BENCH_NS_A:-tbbench-a}; NS_B=${BENCH_NS_B:-tbbench-b}; DEV=thunderbolt0; MTU=65520
IP_A=198.18.2.1; IP_B=198.18.2.2
VETH_A=${BENCH_VETH_A:-tbbnchA}; VETH_B=${BENCH_VETH_B:-tbbnchB}   # temporary names in the root namespace
PY=/usr/bin/python3
FI_TCP_ITERS=${FI_TCP_ITERS:-300}
FI_RXD_ITERS=${FI_RXD_ITERS:-2000}
FI_PORT=47593                           # fi_pingpong's TCP control port (the anchors use 47592)
# fallbacks, used only when fi_pingpong is missing or failed in every repetition:
OFI_RXD_ONEWAY_US=22.9                  # anchors run3: fi_pingpong udp rdm 64 B, usec/xfer (one-way)
OFI_TCP_1MIB_BPS=3580000000             # anchors run3: fi_pingpong tcp msg 1 MiB, 3580 MB/s
export PATH=/usr/local/go/bin:/usr/local/sbin:/usr/sbin:/sbin:$PATH

T0=$(date +%s)
PIDS=()
TMPD=$(mktemp -d /tmp/tbrdma-bench-bin.XXXXXX)
LOGDIR=${BENCH_LOGDIR:-$(mktemp -d /tmp/tbrdma-bench.XXXXXX)}
mkdir -p "$LOGDIR"
RES=$LOGDIR/results.tsv; FAILS=$LOGDIR/failures.tsv
[ "${SUMMARY_ONLY:-0}" = 1 ] || { : >"$RES"; : >"$FAILS"; }

log()  { printf '[bench %4ds] %s\n' "$(( $(date +%s) - T0 ))" "$*" >&2; }
skip() { [[ " $SKIP " == *" $1 "* ]]; }
isnum() { [[ "${1:-}" =~ ^-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$ ]]; }
rec()  { printf '%s\t%s\t%s\t%s\t\n' "$1" "$2" "$3" "$REP" >>"$RES"; }   # key unit value rep bg% (filled by measure)
fail() { printf '%s\t%s\n' "$1" "$2" >>"$FAILS"; log "FAILED $1: $2"; }

# ------------------------------------------------------------------ cleanup
kill_pid() {  # end one process this script started, and reap it
  local p=$1 i
  if kill -0 "$p" 2>/dev/null; then
    kill -TERM "$p" 2>/dev/null
    for ((i = 0; i < 20; i++)); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null
  fi
  wait "$p" 2>/dev/null
  return 0
}
forget_pid() {
  local keep=() x
  for x in "${PIDS[@]}"; do [ "$x" != "$1" ] && keep+=("$x"); done
  PIDS=("${keep[@]}")
}
ns_del() {
  local ns
  for ns in $NS_B $NS_A; do
    ip netns list 2>/dev/null | grep -qw "^$ns" && ip netns del "$ns" 2>/dev/null
  done
  ip link del $VETH_A 2>/dev/null
  return 0
}
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill_pid "$p"; done
  PIDS=()
  ns_del
  rm -rf "$TMPD"
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT TERM HUP

# ------------------------------------------------------------------ CPU noise
# Busy ticks of the whole machine (user+nice+system) versus those of this
# script and its reaped children: the difference is other people's work.
cpu_snap() {
  local _c u n s i w q sq st own
  read -r _c u n s i w q sq st _ </proc/stat
  # fields 14-17 of /proc/PID/stat: utime stime cutime cstime
  own=$(awk '{print $14 + $15 + $16 + $17}' /proc/$$/stat)
  echo "$((u + n + s)) $((u + n + s + i + w + q + sq + st)) $own"
}
foreign_pct() {  # foreign_pct SNAP0 SNAP1
  set -- $1 $2
  local db=$(($4 - $1)) dt=$(($5 - $2)) dn=$(($6 - $3))
  [ "$dt" -gt 0 ] || { echo 0; return; }
  awk -v b="$db" -v t="$dt" -v o="$dn" 'BEGIN { f = (b - o) / t * 100; if (f < 0) f = 0; printf "%.0f", f }'
}
QUIET_LEFT=$QUIET_WAIT
wait_quiet() {  # wait (within the run's QUIET_WAIT budget) until others use < QUIET_MAX %
  local s0 s1 f
  while :; do
    s0=$(cpu_snap); sleep 1; s1=$(cpu_snap)
    f=$(foreign_pct "$s0" "$s1")
    [ "$f" -lt "$QUIET_MAX" ] && return 0
    if [ "$QUIET_LEFT" -le 0 ]; then log "machine busy (${f}% CPU used by others); measuring anyway"; return 0; fi
    log "machine busy (${f}% CPU used by others), waiting (${QUIET_LEFT}s left)"
    QUIET_LEFT=$((QUIET_LEFT - 2)); sleep 1
  done
}

# ------------------------------------------------------------------ the link
ns_setup() {
  ns_del
  ip netns add $NS_A && ip netns add $NS_B || { log "cannot create namespaces"; exit 1; }
  ip link add $VETH_A type veth peer name $VETH_B || { log "cannot create veth"; exit 1; }
  ip link set $VETH_A netns $NS_A && ip link set $VETH_B netns $NS_B || { log "cannot move veth"; exit 1; }
  ip -n $NS_A link set $VETH_A name $DEV
  ip -n $NS_B link set $VETH_B name $DEV
  local ns
  for ns in $NS_A $NS_B; do
    ip netns exec $ns sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1 >/dev/null 2>&1
    ip -n $ns link set lo up
    ip -n $ns link set $DEV mtu $MTU || { log "cannot set MTU $MTU"; exit 1; }
  done
  ip -n $NS_A addr add $IP_A/24 dev $DEV
  ip -n $NS_B addr add $IP_B/24 dev $DEV
  ip -n $NS_A link set $DEV up
  ip -n $NS_B link set $DEV up
  local i
  for ((i = 0; i < 50; i++)); do   # carrier on both ends
    ip -n $NS_A link show $DEV | grep -q LOWER_UP && ip -n $NS_B link show $DEV | grep -q LOWER_UP && return 0
    sleep 0.1
  done
  log "link $DEV did not come up"; exit 1
}

# ------------------------------------------------------------------ process helpers
# srv NAME TIMEOUT cmd... : server in NS_B pinned to CPU_SRV, in the background; sets SRV
srv() {
  local name=$1 t=$2; shift 2
  ip netns exec $NS_B timeout -k 2 "$t" taskset -c "$CPU_SRV" "$@" >"$LOGDIR/$name.srv.out" 2>"$LOGDIR/$name.srv.err" &
  SRV=$!
  PIDS+=("$SRV")
}
# srv_done PID GRACE : let the server finish on its own for GRACE s, then end it
srv_done() {
  local p=$1 g=${2:-0} i
  for ((i = 0; i < g * 10; i++)); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
  kill_pid "$p"; forget_pid "$p"
}
# cli NAME TIMEOUT cmd... : client in NS_A pinned to CPU_CLI, in the foreground
cli() {
  local name=$1 t=$2; shift 2
  # in the background + wait, so that a signal reaches the trap at once
  ip netns exec $NS_A timeout -k 2 "$t" taskset -c "$CPU_CLI" "$@" >"$LOGDIR/$name.cli.out" 2>"$LOGDIR/$name.cli.err" &
  local p=$! rc
  PIDS+=("$p")
  wait "$p"; rc=$?
  forget_pid "$p"
  return $rc
}
wait_listen() {  # wait_listen tcp|udp PORT : in NS_B, up to 10 s
  local i f=-ltnH; [ "$1" = udp ] && f=-lunH
  for ((i = 0; i < 200; i++)); do
    [ -n "$(ip netns exec $NS_B ss $f "sport = :$2" 2>/dev/null)" ] && return 0
    kill -0 "$SRV" 2>/dev/null || return 1   # the server already exited
    sleep 0.05
  done
  return 1
}
# measure KEY FUNC ARGS... : run one measurement and note the CPU others used meanwhile
measure() {
  local s0 bg; s0=$(cpu_snap)
  "$@"
  bg=$(foreign_pct "$s0" "$(cpu_snap)")
  # fill in the bg% column of the rows this measurement just added
  awk -F'\t' -v OFS='\t' -v bg="$bg" '$5 == "" { $5 = bg } { print }' "$RES" >"$RES.tmp" && mv "$RES.tmp" "$RES"
}

# ------------------------------------------------------------------ iperf3
iperf() {  # iperf udp LEN | iperf tcp
  local kind=$1 len=${2:-} k k2 args out
  if [ "$kind" = udp ]; then
    k=iperf3_udp$len
    # -b 0: unlimited; -w 4M: 4 MiB socket buffers (net.core.[rw]mem_max here)
    args=(-u -b 0 -l "$len" -w 4M)
  else
    k=${2:-iperf3_tcp}; args=()   # iperf tcp [KEY]
  fi
  k2="$k.r$REP"
  srv "$k2" 30 iperf3 -s -1 -B $IP_B -p 5201
  wait_listen tcp 5201 || { fail "$k" "server did not listen"; srv_done "$SRV"; return; }
  cli "$k2" 20 iperf3 -c $IP_B -p 5201 -t 5 -J "${args[@]}"
  srv_done "$SRV" 3
  out=$($PY - "$LOGDIR/$k2.cli.out" <<'EOF'
import json, sys
e = json.load(open(sys.argv[1]))['end']
r, s = e['sum_received'], e['sum_sent']
print(r['bits_per_second'] / 8, s['bits_per_second'] / 8, r.get('lost_percent', 0), s.get('retransmits', 0))
EOF
  ) || { fail "$k" "rep $REP: $(tail -c 200 "$LOGDIR/$k2.cli.out" "$LOGDIR/$k2.cli.err" | tr '\n' ' ')"; return; }
  set -- $out
  rec "$k.recv" B/s "$1"; rec "$k.sent" B/s "$2"
  if [ "$kind" = udp ]; then rec "$k.loss" % "$3"; else rec "$k.retrans" count "$4"; fi
  log "$k rep $REP: received $(awk -v b="$1" 'BEGIN{printf "%.3f", b/1e9}') GB/s, sent $(awk -v b="$2" 'BEGIN{printf "%.3f", b/1e9}') GB/s"
}

# ------------------------------------------------------------------ loss (issue 18)
# loss_set N [HOOK] : both namespaces drop N per mille of the packets (at
# random, nftables) they send to the other (HOOK output, the default: the
# sender's kernel refuses the datagram or segment, and both TCP and tbrdma
# learn of it at once) or receive from it (HOOK input: as on a lossy wire,
# the sender learns of it only from its peer); 0 removes the rule
loss_set() {
  local n=$1 hook=${2:-output} ns peer dir
  for ns in $NS_A $NS_B; do
    peer=$IP_B; [ $ns = $NS_B ] && peer=$IP_A
    dir=daddr; [ "$hook" = input ] && dir=saddr
    ip netns exec $ns nft delete table inet tbbench_loss 2>/dev/null
    [ "$n" -gt 0 ] || continue
    ip netns exec $ns nft add table inet tbbench_loss &&
      ip netns exec $ns nft "add chain inet tbbench_loss c { type filter hook $hook priority 0; }" &&
      ip netns exec $ns nft "add rule inet tbbench_loss c ip $dir $peer numgen random mod 1000 < $n drop" ||
      return 1
  done
}
# loss_section : iperf3 TCP and write-bw 64 KiB / 1 MiB (new and, with
# TBRDMA_OLD_BIN, old) at 0.1, 1 and 5 % loss in both directions, dropped
# on output (keys loss*, the issue's method) and on input (keys wloss*);
# only SKIP=loss leaves it out
loss_section() {
  local n hook pre i64=${LOSS_ITERS%/*} i1m=${LOSS_ITERS#*/}
  command -v nft >/dev/null || { fail loss "nft not found: install nftables (Debian: apt-get install nftables) or SKIP=loss"; return; }
  for hook in output input; do
    pre=loss; [ $hook = input ] && pre=wloss
    for n in 1 10 50; do
      loss_set $n $hook || { fail loss "cannot set the nftables drop rule ($n per mille, $hook)"; loss_set 0; return; }
      measure iperf tcp iperf3_tcp_$pre$n
      measure tb_bw $pre${n}_write_bw_64KiB 65536 "$i64"
      old measure tb_bw old_$pre${n}_write_bw_64KiB 65536 "$i64"
      measure tb_bw $pre${n}_write_bw_1MiB 1048576 "$i1m"
      old measure tb_bw old_$pre${n}_write_bw_1MiB 1048576 "$i1m"
    done
  done
  loss_set 0
}

# ------------------------------------------------------------------ sockperf
sockperf_pp() {  # sockperf_pp block|poll
  local mode=$1 k=sockperf_udp64_$1 k2 f opts=() avg p50 p99
  [ "$mode" = poll ] && opts=(--nonblocked --timeout 0)   # busy-poll on both ends
  k2="$k.r$REP"
  srv "$k2" 20 sockperf server -i $IP_B -p 11111 "${opts[@]}"
  wait_listen udp 11111 || { fail "$k" "server did not listen"; srv_done "$SRV"; return; }
  cli "$k2" 15 sockperf ping-pong -i $IP_B -p 11111 -m 64 -t 3 --full-rtt "${opts[@]}"
  srv_done "$SRV"
  f="$LOGDIR/$k2.cli.txt"
  cat "$LOGDIR/$k2.cli.out" "$LOGDIR/$k2.cli.err" | sed 's/\x1b\[[0-9;]*m//g' >"$f"
  avg=$(sed -n 's/.*avg-rtt=\([0-9.]*\).*/\1/p' "$f" | head -1)
  p50=$(awk '/percentile 50.000/ {print $NF; exit}' "$f")
  p99=$(awk '/percentile 99.000/ {print $NF; exit}' "$f")
  if isnum "$p50"; then
    rec "$k.rtt_p50" us "$p50"
    isnum "$avg" && rec "$k.rtt_avg" us "$avg"
    isnum "$p99" && rec "$k.rtt_p99" us "$p99"
    log "$k rep $REP: RTT p50 $p50 us (avg $avg, p99 $p99)"
  else
    fail "$k" "rep $REP: no percentile: $(tail -c 200 "$f" | tr '\n' ' ')"
  fi
}

# ------------------------------------------------------------------ libfabric
# fi_pp KEY bw|oneway PROVIDER EP SIZE ITERS : fi_pingpong server in NS_B,
# client in NS_A (one message in flight, ping-pong). The client's last row has
# the columns: bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec, where
# usec/xfer = time / (2 x iterations) = one-way latency and MB/sec = bytes of
# both directions / time in 1e6 B/s - the anchors' definitions (anchors
# README). Records KEY.bw (B/s) or KEY.oneway (us).
# A provider starting with "verbs" runs over tbrdma's C library (tbrdma exec).
fi_pp() {
  local k=$1 what=$2 prov=$3 ep=$4 sz=$5 it=$6 k2 rc row pre=()
  k2="$k.r$REP"
  [[ $prov == verbs* ]] && pre=("$LIBTB" exec --)
  srv "$k2" 60 "${pre[@]}" fi_pingpong -p "$prov" -e "$ep" -S "$sz" -I "$it" -B $FI_PORT
  wait_listen tcp $FI_PORT || { fail "$k" "rep $REP: server did not listen (logs $LOGDIR/$k2.srv.*): $(tail -c 200 "$LOGDIR/$k2.srv.err" | tr '\n' ' ')"; srv_done "$SRV"; return; }
  cli "$k2" 40 "${pre[@]}" fi_pingpong -p "$prov" -e "$ep" -S "$sz" -I "$it" -P $FI_PORT $IP_B
  rc=$?
  srv_done "$SRV" 3
  row=$(awk 'NR > 1 && $1 ~ /^[0-9.]+[kmg]?$/ && NF >= 8 {l = $0} END {print l}' "$LOGDIR/$k2.cli.out")
  set -- $row
  if [ $rc -ne 0 ] || [ $# -lt 8 ] || ! isnum "$6" || ! isnum "$7"; then
    [ $rc -eq 124 ] && rc="124 (timed out after 40 s)"
    fail "$k" "rep $REP: rc=$rc (logs $LOGDIR/$k2.*) $(tail -c 200 "$LOGDIR/$k2.cli.out" "$LOGDIR/$k2.cli.err" | tr '\n' ' ')"
    return
  fi
  if [ "$what" = bw ]; then rec "$k.bw" B/s "$(awk -v m="$6" 'BEGIN{printf "%.0f", m * 1e6}')"
  else rec "$k.oneway" us "$7"; fi
  log "$k rep $REP: $6 MB/s, $7 us one-way ($2 x $1)"
}

# ------------------------------------------------------------------ tbrdma
# tb KEY CMD ARGS... : tbrdma CMD server in NS_B, client in NS_A; parses the
# client's result row. Sets TB_ROW to the row's fields. A KEY serve_* runs
# "tbrdma serve" as the server instead (started for this one client, so
# that each measurement starts alike), with the same client command.
tb() {
  local k=$1 cmd=$2; shift 2
  local k2="$k.r$REP" rc row bin=$BIN grace=5
  [[ "$k" == old_* ]] && bin=$OLD_BIN
  TB_ROW=
  if [[ "$k" == serve_* ]]; then
    srv "$k2" 90 env "${TB_ENV[@]}" "$bin" serve --bind $IP_B --no-advertise
    grace=0   # serve does not end with its client
  else
    srv "$k2" 90 env "${TB_ENV[@]}" "$bin" "$cmd" --bind $IP_B --timeout 80s "$@"
  fi
  wait_listen tcp 18515 || { fail "$k" "server did not listen: $(tail -c 200 "$LOGDIR/$k2.srv.err")"; srv_done "$SRV"; return 1; }
  cli "$k2" 90 env "${TB_ENV[@]}" "$bin" "$cmd" --bind $IP_A --timeout 80s "$@" $IP_B
  rc=$?
  srv_done "$SRV" "$grace"
  # the result row: first field = #bytes, second = #iterations, all numeric
  row=$(awk '$1 ~ /^[0-9]+$/ && $2 ~ /^[0-9]+$/ && NF >= 5 {l = $0} END {print l}' "$LOGDIR/$k2.cli.out")
  if [ $rc -ne 0 ] || [ -z "$row" ]; then
    fail "$k" "rep $REP: rc=$rc $(tail -c 300 "$LOGDIR/$k2.cli.err" | tr '\n' ' ')"
    return 1
  fi
  TB_ROW=$row
}
tb_bw() {  # tb_bw KEY SIZE ITERS [flags...] : write-bw, BW average MiB/s -> B/s
  local k=$1 s=$2 n=$3; shift 3
  tb "$k" write-bw -s "$s" -n "$n" "$@" || return
  set -- $TB_ROW   # bytes iters peak[MiB/s] avg[MiB/s] Mpps
  isnum "$4" || { fail "$k" "rep $REP: bad row: $TB_ROW"; return; }
  rec "$k.bw" B/s "$(awk -v m="$4" 'BEGIN{printf "%.0f", m * 1048576}')"
  rec "$k.iters" count "$2"
  log "$k rep $REP: $4 MiB/s average ($2 x $1 B)"
  TB_MIBPS=$4
}
tb_lat() {  # tb_lat KEY CMD [flags...] : t_typical (median) and p99 in us
  local k=$1 cmd=$2; shift 2
  tb "$k" "$cmd" -s 64 -n "$LAT_ITERS" "$@" || return
  set -- $TB_ROW   # bytes iters t_min t_max t_typical t_avg t_stdev p99 p99.9
  isnum "$5" || { fail "$k" "rep $REP: bad row: $TB_ROW"; return; }
  rec "$k.t_typical" us "$5"; rec "$k.t_avg" us "$6"; rec "$k.t_min" us "$3"
  isnum "${8:-}" && rec "$k.p99" us "$8"
  log "$k rep $REP: t_typical $5 us (min $3, avg $6, p99 ${8:-?})"
}

# ------------------------------------------------------------------ package stream
# scopy KEY rdma|tcp [flags...] : bench/streamcopy, server in NS_B, sender in
# NS_A; io.Copy of STREAM_BYTES, half-close, until the server's end; B/s
scopy() {
  local k=$1 net=$2; shift 2
  local k2="$k.r$REP" rc row i
  srv "$k2" 90 "$SCOPY" serve -net "$net" -addr $IP_B:7471 "$@"
  for ((i = 0; i < 100; i++)); do   # "listening" (rdma_cm listens on no socket ss sees)
    grep -q listening "$LOGDIR/$k2.srv.out" 2>/dev/null && break
    kill -0 "$SRV" 2>/dev/null || break
    sleep 0.05
  done
  cli "$k2" 90 "$SCOPY" send -net "$net" -addr $IP_B:7471 -local $IP_A -bytes "$STREAM_BYTES" "$@"
  rc=$?
  srv_done "$SRV" 5
  row=$(tail -1 "$LOGDIR/$k2.cli.out")
  set -- $row   # bytes seconds MB/s
  if [ $rc -ne 0 ] || ! isnum "${3:-}"; then
    fail "$k" "rep $REP: rc=$rc $(tail -c 300 "$LOGDIR/$k2.cli.err" | tr '\n' ' ')"
    return
  fi
  rec "$k.bw" B/s "$(awk -v m="$3" 'BEGIN{printf "%.0f", m * 1e6}')"
  log "$k rep $REP: $3 MB/s ($1 B in $2 s)"
}

# ------------------------------------------------------------------ the C library
# lib KEY PROG ARGS... : the stock perftest PROG over tbrdma's C library
# (LD_LIBRARY_PATH, as tbrdma exec runs it) in both namespaces, with the
# flags the tbrdma commands get (GID index 1, -F); parses the client's row.
lib() {
  local k=$1 prog=$2; shift 2
  local k2="$k.r$REP" rc row
  TB_ROW=
  srv "$k2" 90 env LD_LIBRARY_PATH="$LIBDIR" "$prog" -x 1 -F "$@"
  wait_listen tcp 18515 || { fail "$k" "server did not listen: $(tail -c 200 "$LOGDIR/$k2.srv.err")"; srv_done "$SRV"; return 1; }
  cli "$k2" 90 env LD_LIBRARY_PATH="$LIBDIR" "$prog" -x 1 -F "$@" $IP_B
  rc=$?
  srv_done "$SRV" 5
  row=$(awk '$1 ~ /^[0-9]+$/ && $2 ~ /^[0-9]+$/ && NF >= 5 {l = $0} END {print l}' "$LOGDIR/$k2.cli.out")
  if [ $rc -ne 0 ] || [ -z "$row" ]; then
    fail "$k" "rep $REP: rc=$rc $(tail -c 300 "$LOGDIR/$k2.cli.out" "$LOGDIR/$k2.cli.err" | tr '\n' ' ')"
    return 1
  fi
  TB_ROW=$row
}
lib_bw() {  # lib_bw KEY SIZE ITERS : ib_write_bw, BW average -> B/s (the unit tbrdma's rows use)
  local k=$1 s=$2 n=$3
  lib "$k" ib_write_bw -s "$s" -n "$n" || return
  set -- $TB_ROW
  isnum "$4" || { fail "$k" "rep $REP: bad row: $TB_ROW"; return; }
  rec "$k.bw" B/s "$(awk -v m="$4" 'BEGIN{printf "%.0f", m * 1048576}')"
  log "$k rep $REP: $4 MB/s average ($2 x $1 B)"
}
lib_lat() {  # lib_lat KEY PROG [flags...] : t_typical and p99 in us
  local k=$1 prog=$2; shift 2
  lib "$k" "$prog" -s 64 -n "$LAT_ITERS" "$@" || return
  set -- $TB_ROW
  isnum "$5" || { fail "$k" "rep $REP: bad row: $TB_ROW"; return; }
  rec "$k.t_typical" us "$5"; rec "$k.t_avg" us "$6"; rec "$k.t_min" us "$3"
  isnum "${8:-}" && rec "$k.p99" us "$8"
  log "$k rep $REP: t_typical $5 us (min $3, avg $6, p99 ${8:-?})"
}
lib_cost() {  # lib_cost : cabi/bench/verbs_cost, ns per ibv_post_send and per empty ibv_poll_cq
  local k=verbs_cost k2="verbs_cost.r$REP" line
  cli "$k2" 60 env LD_LIBRARY_PATH="$LIBDIR" "$TMPD/verbs_cost" 200000 || { fail "$k" "rep $REP: $(tail -c 200 "$LOGDIR/$k2.cli.err")"; return; }
  while read -r name v unit; do
    isnum "$v" && rec "verbs_cost.$name" ns "$v"
  done <"$LOGDIR/$k2.cli.out"
  log "verbs_cost rep $REP: $(tr '\n' ' ' <"$LOGDIR/$k2.cli.out")"
}

# ------------------------------------------------------------------ engines
# UCX, Open MPI and libfabric over the C library against their own TCP
# transports on the same link (docs/engines.md).
# ucx_pp KEY TLS TEST SIZE ITERS : ucx_perftest server in NS_B, client in
# NS_A; a TLS naming verbs runs over the library (tbrdma exec). Final row:
# iterations, latency typical/average/overall (us, one way), bandwidth
# average/overall (MB/s = 2^20 B/s), message rate average/overall.
ucx_pp() {
  local k=$1 tls=$2 test=$3 sz=$4 it=$5 k2 rc row pre=() env
  k2="$k.r$REP"
  env=(UCX_TLS="$tls" UCX_NET_DEVICES="$DEV")
  [[ $tls == *verbs* ]] && pre=("$LIBTB" exec --) env=(UCX_TLS="$tls" UCX_NET_DEVICES="tb_$DEV:1")
  srv "$k2" 90 env "${env[@]}" "${pre[@]}" ucx_perftest -p 13338
  wait_listen tcp 13338 || { fail "$k" "rep $REP: server did not listen: $(tail -c 200 "$LOGDIR/$k2.srv.err" | tr '\n' ' ')"; srv_done "$SRV"; return; }
  cli "$k2" 90 env "${env[@]}" "${pre[@]}" ucx_perftest $IP_B -p 13338 -t "$test" -s "$sz" -n "$it" -w 20
  rc=$?
  srv_done "$SRV" 3
  row=$(grep '^Final:' "$LOGDIR/$k2.cli.out" | tail -1)
  set -- $row
  if [ $rc -ne 0 ] || [ $# -lt 9 ] || ! isnum "$7"; then
    fail "$k" "rep $REP: rc=$rc $(tail -c 300 "$LOGDIR/$k2.cli.out" "$LOGDIR/$k2.cli.err" | tr '\n' ' ')"; return
  fi
  if [[ $test == *_bw ]]; then
    rec "$k.bw" B/s "$(awk -v m="$7" 'BEGIN{printf "%.0f", m * 1048576}')"; log "$k rep $REP: $7 MB/s overall"
  else
    rec "$k.lat" us "$3"; log "$k rep $REP: $3 us typical ($4 average)"
  fi
}
# mpi_pp KEY ucx|tcp : cabi/examples/mpi_pingpong, rank 0 in NS_A (mpirun
# too), rank 1 in NS_B; 8 B latency (half a round trip) and 4 MiB bandwidth.
mpi_pp() {
  local k=$1 how=$2 k2 rc lat bw a
  k2="$k.r$REP"
  a=(env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -np 2 --host $IP_A,$IP_B
     --mca plm_rsh_agent "$ROOT/cabi/examples/netns-agent.sh" --mca rtc_hwloc_vmhole none --bind-to none)
  if [ "$how" = ucx ]; then
    a+=(--mca pml ucx --mca btl self --mca osc ucx -x UCX_TLS=rc_verbs,ud_verbs:aux -x UCX_NET_DEVICES=tb_$DEV:1 "$LIBTB" exec --)
  else
    a+=(--mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include $DEV)
  fi
  ip netns exec $NS_A timeout -k 2 120 "${a[@]}" "$TMPD/mpi_pingpong" -n "$LAT_ITERS" -m 64 >"$LOGDIR/$k2.out" 2>"$LOGDIR/$k2.err"
  rc=$?
  lat=$(awk '$1 == "lat" {print $8}' "$LOGDIR/$k2.out") bw=$(awk '$1 == "bw" {print $8}' "$LOGDIR/$k2.out")
  if [ $rc -ne 0 ] || ! isnum "$lat" || ! isnum "$bw" || ! grep -q '^verified 1 pairs' "$LOGDIR/$k2.out"; then
    fail "$k" "rep $REP: rc=$rc $(tail -c 300 "$LOGDIR/$k2.out" "$LOGDIR/$k2.err" | tr '\n' ' ')"; return
  fi
  rec "$k.lat" us "$lat"; rec "$k.bw" B/s "$(awk -v m="$bw" 'BEGIN{printf "%.0f", m * 1e6}')"
  log "$k rep $REP: 8 B $lat us one way, 4 MiB $bw MB/s"
}

# ------------------------------------------------------------------ main
if [ "${SUMMARY_ONLY:-0}" = 1 ]; then   # re-print the summary of BENCH_LOGDIR's run
  [ -n "${BENCH_LOGDIR:-}" ] && [ -f "$LOGDIR/meta.txt" ] || { echo "SUMMARY_ONLY=1 needs BENCH_LOGDIR of a finished run" >&2; exit 1; }
  trap - EXIT; rm -rf "$TMPD"
else
[ "$(id -u)" = 0 ] || { echo "bench/run.sh needs root (network namespaces, veth)" >&2; exit 1; }
for c in ip iperf3 sockperf taskset ss timeout; do
  command -v $c >/dev/null || { echo "bench/run.sh: $c not found (apt-get install iperf3 sockperf libfabric-bin iproute2 util-linux)" >&2; exit 1; }
done
if ! skip libfabric && ! command -v fi_pingpong >/dev/null; then   # optional: see the header
  log "fi_pingpong not found (apt-get install libfabric-bin): the libfabric ratios will use the anchors' figures"
  SKIP="$SKIP libfabric"
fi
[ -x "$PY" ] || PY=$(command -v python3) || { echo "bench/run.sh: python3 not found" >&2; exit 1; }

if [ -n "${TBRDMA_BIN:-}" ]; then
  BIN=$TBRDMA_BIN
else
  BIN=$TMPD/tbrdma
  log "building tbrdma into $TMPD"
  (cd "$ROOT" && timeout 300 go build -o "$BIN" ./cmd/tbrdma) >"$LOGDIR/build.log" 2>&1 \
    || { log "go build failed:"; cat "$LOGDIR/build.log" >&2; exit 1; }
fi
TB_VERSION=$("$BIN" version 2>/dev/null | head -1)
# bench/streamcopy: io.Copy over a stream.Conn or a TCP connection
SCOPY=$TMPD/streamcopy
STREAM_BYTES=${STREAM_BYTES:-1073741824}
if ! skip stream && ! (cd "$ROOT" && timeout 300 go build -o "$SCOPY" ./bench/streamcopy) >>"$LOGDIR/build.log" 2>&1; then
  log "bench/streamcopy did not build: stream not measured"; SKIP="$SKIP stream"
fi
LIBDIR=
if ! skip cabi || ! skip engines; then
  # The C library (cabi/build.sh) and the stock perftest over it: needs gcc,
  # libibverbs-dev, librdmacm-dev and perftest; without them, skipped (and
  # the engines with it).
  if command -v ib_write_bw >/dev/null && (cd "$ROOT" && cabi/build.sh "$TMPD/cabi") >"$LOGDIR/cabi-build.log" 2>&1 &&
    cc -O2 -o "$TMPD/verbs_cost" "$ROOT/cabi/bench/verbs_cost.c" -libverbs >>"$LOGDIR/cabi-build.log" 2>&1; then
    LIBDIR=$TMPD/cabi/lib
    log "C library built into $LIBDIR"
  else
    log "C library not measured (needs perftest, gcc, libibverbs-dev, librdmacm-dev): $(tail -c 200 "$LOGDIR/cabi-build.log" | tr '\n' ' ')"
    SKIP="$SKIP cabi engines"
  fi
fi
LIBTB=$TMPD/cabi/tbrdma   # tbrdma beside the library: "tbrdma exec" finds it in lib/
if ! skip engines; then
  # UCX, Open MPI and libfabric over the library: needs the library and
  # ucx-utils, openmpi-bin, libopenmpi-dev, libfabric-bin; without them, skipped.
  miss=
  for c in ucx_perftest mpirun mpicc fi_pingpong; do command -v $c >/dev/null || miss="$miss $c"; done
  if [ -z "$LIBDIR" ] || [ -n "$miss" ] ||
    ! mpicc -O2 -o "$TMPD/mpi_pingpong" "$ROOT/cabi/examples/mpi_pingpong.c" >>"$LOGDIR/cabi-build.log" 2>&1; then
    log "engines not measured (needs the C library and ucx-utils openmpi-bin libopenmpi-dev libfabric-bin;${miss:+ missing$miss})"
    SKIP="$SKIP engines"
  fi
fi
OLD_BIN=${TBRDMA_OLD_BIN:-}
[ -z "$OLD_BIN" ] || [ -x "$OLD_BIN" ] || { echo "bench/run.sh: TBRDMA_OLD_BIN=$OLD_BIN is not executable" >&2; exit 1; }
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
RUN_SNAP0=$(cpu_snap)
log "logs in $LOGDIR; client $NS_A ($IP_A) on CPU $CPU_CLI, server $NS_B ($IP_B) on CPU $CPU_SRV; REPS=$REPS"
ns_setup
log "link up: veth $DEV, MTU $MTU"

# Each ratio's two sides run back to back within a repetition, so that a
# burst of other work on the machine hits both or neither; ratios are then
# taken per repetition (see the summary below).
WB1M_N=
TB_ENV=()       # extra environment for both tbrdma ends
run_tb() { skip tbrdma || measure "$@"; }
old() { [ -n "$OLD_BIN" ] && "$@"; return 0; }   # only with TBRDMA_OLD_BIN
run_kernel() { local s=$1; shift; skip "$s" || measure "$@"; }
run_lib() { skip cabi || measure "$@"; }
run_eng() { skip engines || measure "$@"; }
run_stream() { skip stream || measure "$@"; }
run_serve() { skip serve || skip tbrdma || measure "$@"; }
# qps_section : write-bw -q 1/2/4/8 at 64 KiB and 1 MiB, QPS_GIB GiB per run
# (issue 18: the aggregate with several QPs against one QP's, same run)
qps_section() {
  local q order="1 2 4 8"
  # every other repetition in the reverse order, so that a host that slows
  # down (or speeds up) within a repetition does not always favour -q 1
  ((REP % 2 == 0)) && order="8 4 2 1"
  for q in $order; do
    measure tb_bw qps_write_bw_64KiB_q$q 65536 $((QPS_GIB * 16384 / q)) -q $q
    measure tb_bw qps_write_bw_1MiB_q$q 1048576 $((QPS_GIB * 1024 / q)) -q $q
  done
}
for ((REP = 1; REP <= REPS; REP++)); do
  wait_quiet
  log "--- repetition $REP of $REPS"
  TB_MIBPS=
  run_tb tb_bw write_bw_64KiB 65536 5000
  if [ -z "$WB1M_N" ]; then
    # -n for ~WB_SECS seconds of 1 MiB WRITEs, from the 64 KiB rate (200..20000)
    WB1M_N=$(awk -v m="${TB_MIBPS:-500}" -v s="$WB_SECS" 'BEGIN{n = int(m * s); if (n < 200) n = 200; if (n > 20000) n = 20000; print n}')
    log "write-bw 1 MiB: -n $WB1M_N (about ${WB_SECS}s at ${TB_MIBPS:-?} MiB/s)"
  fi
  run_kernel iperf iperf udp 65000
  run_tb tb_bw write_bw_1MiB 1048576 "$WB1M_N"
  run_lib lib_bw lib_write_bw_1MiB 1048576 "$WB1M_N"
  # tbrdma's large-segment extension (both ends pass --large-segments and
  # agree on 61440-byte packets for the 65520-byte link): ~3x the rate, so
  # 3x the messages for about the same time
  run_tb tb_bw write_bw_1MiB_large 1048576 "$((WB1M_N * 3))" --large-segments
  # the same clients through "tbrdma serve", right after (issue 18)
  run_serve tb_bw serve_write_bw_1MiB_large 1048576 "$((WB1M_N * 3))" --large-segments
  run_serve tb_bw serve_write_bw_1MiB 1048576 "$WB1M_N"
  run_tb tb_bw write_bw_1MiB_b 1048576 "$WB1M_N"
  run_kernel libfabric fi_pp libfabric_tcp_msg_1MiB bw tcp msg 1048576 "$FI_TCP_ITERS"
  old run_tb tb_bw old_write_bw_1MiB 1048576 "$WB1M_N"
  run_stream scopy stream_copy rdma
  run_stream scopy tcp_copy tcp
  run_stream scopy stream_copy_large rdma -segments
  run_kernel iperf iperf udp 4096
  run_kernel iperf iperf tcp
  run_kernel sockperf sockperf_pp block
  run_tb tb_lat read_lat_64B_event read-lat -e
  old run_tb tb_lat old_read_lat_64B_event read-lat -e
  run_tb tb_lat send_lat_64B_event send-lat -e
  run_kernel sockperf sockperf_pp poll
  run_tb tb_lat read_lat_64B_poll read-lat
  run_serve tb_lat serve_read_lat_64B_poll read-lat
  run_lib lib_lat lib_read_lat_64B_poll ib_read_lat
  old run_tb tb_lat old_read_lat_64B_poll read-lat
  run_tb tb_lat write_lat_64B write-lat
  run_serve tb_lat serve_write_lat_64B write-lat
  run_kernel libfabric fi_pp libfabric_udp_rdm_64B oneway udp rdm 64 "$FI_RXD_ITERS"
  old run_tb tb_lat old_write_lat_64B write-lat
  run_tb tb_lat send_lat_64B_poll send-lat
  run_serve tb_lat serve_send_lat_64B_poll send-lat
  run_lib lib_lat lib_send_lat_64B_poll ib_send_lat
  run_tb tb_lat read_lat_64B_event2 read-lat -e
  run_lib lib_lat lib_read_lat_64B_event ib_read_lat -e
  run_lib lib_cost
  run_eng ucx_pp ucx_rc_tag_bw_1MiB rc_verbs,ud_verbs:aux tag_bw 1048576 2000
  run_eng ucx_pp ucx_tcp_tag_bw_1MiB tcp tag_bw 1048576 2000
  run_eng ucx_pp ucx_rc_tag_lat_8B rc_verbs,ud_verbs:aux tag_lat 8 "$LAT_ITERS"
  run_eng ucx_pp ucx_tcp_tag_lat_8B tcp tag_lat 8 "$LAT_ITERS"
  run_eng mpi_pp mpi_ucx ucx
  run_eng mpi_pp mpi_tcp tcp
  run_eng fi_pp fi_verbs_rxm_1MiB bw 'verbs;ofi_rxm' rdm 1048576 "$FI_TCP_ITERS"
  run_eng fi_pp fi_tcp_rxm_1MiB bw 'tcp;ofi_rxm' rdm 1048576 "$FI_TCP_ITERS"
  run_eng fi_pp fi_verbs_rxm_64B oneway 'verbs;ofi_rxm' rdm 64 "$FI_RXD_ITERS"
  run_eng fi_pp fi_tcp_rxm_64B oneway 'tcp;ofi_rxm' rdm 64 "$FI_RXD_ITERS"
  skip qps || skip tbrdma || qps_section
  skip loss || loss_section
done
cleanup
trap - EXIT

{
  echo "date=$(date -u +%FT%TZ)"
  echo "duration_s=$(( $(date +%s) - T0 ))"
  echo "kernel=$(uname -r)"
  echo "cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
  echo "ncpu=$(nproc)"
  echo "load_start=$LOAD0"
  echo "load_end=$(cut -d' ' -f1-3 /proc/loadavg)"
  echo "foreign_cpu_pct=$(foreign_pct "$RUN_SNAP0" "$(cpu_snap)")"
  echo "reps=$REPS"
  echo "link=veth $DEV, netns $NS_A ($IP_A, client, CPU $CPU_CLI) <-> $NS_B ($IP_B, server, CPU $CPU_SRV), MTU $MTU"
  echo "tbrdma=$TB_VERSION"
  echo "tbrdma_old=${OLD_BIN:+$("$OLD_BIN" version 2>/dev/null | head -1) ($OLD_BIN)}"
  echo "go=$(go version 2>/dev/null | awk '{print $3}')"
  echo "iperf3=$(iperf3 -v 2>/dev/null | head -1 | awk '{print $2}')"
  echo "sockperf=$(sockperf --version 2>/dev/null | grep -o '[0-9][0-9.]*' | head -1)"
  echo "libfabric=$(skip libfabric || fi_info --version 2>/dev/null | awk '/^libfabric:/ {print $2}')"
  echo "fi_pingpong_iters=tcp msg 1 MiB -I $FI_TCP_ITERS, udp rdm 64 B -I $FI_RXD_ITERS"
  echo "write_bw_1MiB_iters=$WB1M_N"
  echo "logdir=$LOGDIR"
} >"$LOGDIR/meta.txt"
fi

$PY - "$RES" "$FAILS" "$LOGDIR/meta.txt" "$BENCH_OUT" "$OFI_RXD_ONEWAY_US" "$QUIET_MAX" "$OFI_TCP_1MIB_BPS" <<'EOF'
import json, os, statistics, sys
resf, failf, metaf, out, ofi, qmax, ofitcp = sys.argv[1:8]
ofi, qmax, ofitcp = float(ofi), float(qmax), float(ofitcp)
meta = dict(l.rstrip('\n').split('=', 1) for l in open(metaf) if '=' in l)

# results.tsv: key, unit, value, repetition, bg% (CPU other processes used meanwhile)
rows, units, order = {}, {}, []
for l in open(resf):
    k, u, v, r, bg = (l.rstrip('\n').split('\t') + ['', ''])[:5]
    if k not in rows:
        rows[k], units[k] = {}, u
        order.append(k)
    rows[k][int(r)] = (float(v), float(bg) if bg else None)
raw = {}
for k in order:
    v = [x[0] for x in rows[k].values()]
    raw[k] = {'unit': units[k], 'median': statistics.median(v), 'min': min(v), 'max': max(v), 'n': len(v),
              'by_rep': {str(r): {'value': x[0], 'foreign_cpu_pct': x[1]} for r, x in sorted(rows[k].items())}}

def side(x, rep):  # (value, bg%) of one side of a ratio in one repetition, or None
    if isinstance(x, float):
        return (x, 0.0)
    f = 1.0
    if x.endswith('*2'):
        x, f = x[:-2], 2.0
    if rep not in rows.get(x, {}):
        return None
    v, bg = rows[x][rep]
    return (v * f, bg if bg is not None else 0.0)
def unit(x):
    return 'us' if isinstance(x, float) else units.get(x[:-2] if x.endswith('*2') else x, '')

# libfabric denominators: this run's fi_pingpong figures; the anchors'
# constants only if fi_pingpong did not run or failed in every repetition
libfab = meta.get('libfabric') or '?'
if 'libfabric_tcp_msg_1MiB.bw' in rows:
    fitcp = 'libfabric_tcp_msg_1MiB.bw'
    fitcp_note = 'denominator measured in this run: fi_pingpong -p tcp -e msg -S 1048576 (libfabric %s), one message in flight' % libfab
else:
    fitcp = ofitcp
    fitcp_note = 'denominator %.2f GB/s is the anchors figure, not measured in this run (fi_pingpong missing, skipped or failed)' % (ofitcp / 1e9)
if 'libfabric_udp_rdm_64B.oneway' in rows:
    firxd = 'libfabric_udp_rdm_64B.oneway'
    firxd_note = 'denominator measured in this run: fi_pingpong -p udp -e rdm -S 64 usec/xfer (libfabric %s)' % libfab
else:
    firxd = ofi
    firxd_note = 'denominator %.1f us is the anchors figure, not measured in this run (fi_pingpong missing, skipped or failed)' % ofi

# (name, numerator, denominator (key or constant), target op, target, note)
R = [
    # targets as issue 18 raised them (0.75 / 0.6 / 1.5 before)
    ('write-bw 1 MiB, large segments / iperf3 UDP 65000 B received', 'write_bw_1MiB_large.bw', 'iperf3_udp65000.recv', '>=', 0.9,
     'tbrdma extension: both ends pass --large-segments and agree on 61440-byte packets'),
    ('write-bw 1 MiB, IB MTU 4096 / iperf3 UDP 65000 B received', 'write_bw_1MiB.bw', 'iperf3_udp65000.recv', '>=', 0.7,
     'the standard path (what rdma_rxe peers use), GSO/GRO batched'),
    ('best write-bw 1 MiB / libfabric tcp fi_pingpong 1 MiB', 'write_bw_1MiB_large.bw', fitcp, '>=', 1.5, fitcp_note),
    ('read-lat 64 B event (-e) t_typical / sockperf 64 B blocking p50 RTT', 'read_lat_64B_event.t_typical',
     'sockperf_udp64_block.rtt_p50', '<=', 1.3, 'both are full round trips'),
    ('read-lat 64 B busy-poll t_typical / sockperf 64 B busy-poll p50 RTT', 'read_lat_64B_poll.t_typical',
     'sockperf_udp64_poll.rtt_p50', '<=', 1.3,
     'tbrdma\'s client polls the CQ and reads the socket inline, the server\'s receive loop polls it (2 ms window); sockperf busy-polls both ends'),
    ('write-lat 64 B t_typical / libfabric udp;ofi_rxd 64 B one-way', 'write_lat_64B.t_typical', firxd, '<=', 0.5, firxd_note),
    ('io.Copy over a stream.Conn (default: large segments) / over a TCP connection', 'stream_copy_large.bw', 'tcp_copy.bw', '>=', 1.5,
     'bench/streamcopy -segments, STREAM_BYTES (1 GiB) one way, half-closed, until the receiver is done; 16 x 256 KiB rings, CRC-32C both ends; 61440-byte packets, what a stream uses by default on this link'),
    # extras, no target
    ('io.Copy over a stream.Conn at the path MTU (NoSegments) / over TCP', 'stream_copy.bw', 'tcp_copy.bw', None, None,
     'SegmentSize: stream.NoSegments, 4096-byte packets'),
    ('write-bw 1 MiB / iperf3 UDP 4096 B received', 'write_bw_1MiB.bw', 'iperf3_udp4096.recv', None, None,
     'tbrdma sends 4096-byte payloads too, but in GSO batches'),
    ('write-bw 64 KiB / iperf3 UDP 4096 B received', 'write_bw_64KiB.bw', 'iperf3_udp4096.recv', None, None, ''),
    ('write-bw 1 MiB / iperf3 TCP', 'write_bw_1MiB.bw', 'iperf3_tcp.recv', None, None,
     'single-stream TCP is reordering-limited on this link (anchors README)'),
    ('send-lat 64 B event t_typical x2 / sockperf 64 B blocking p50 RTT', 'send_lat_64B_event.t_typical*2',
     'sockperf_udp64_block.rtt_p50', None, None, 'send-lat is half a round trip'),
    ('write-lat 64 B t_typical x2 / sockperf 64 B busy-poll p50 RTT', 'write_lat_64B.t_typical*2',
     'sockperf_udp64_poll.rtt_p50', None, None, 'write-lat is half a round trip and spins on memory'),
    # the C library (cabi): stock perftest over it against the same command of tbrdma, same run
    ('ib_write_bw 1 MiB over the C library / tbrdma write-bw 1 MiB', 'lib_write_bw_1MiB.bw', 'write_bw_1MiB.bw', '>=', 0.9,
     'stock perftest 4.5 with LD_LIBRARY_PATH at cabi/build.sh\'s library, both ends; IB MTU 4096'),
    ('ib_read_lat 64 B over the C library t_typical / tbrdma read-lat', 'lib_read_lat_64B_poll.t_typical', 'read_lat_64B_poll.t_typical', '<=', 1.15,
     'both busy-poll (the library receives inline in the polling thread)'),
    ('ib_send_lat 64 B over the C library t_typical / tbrdma send-lat', 'lib_send_lat_64B_poll.t_typical', 'send_lat_64B_poll.t_typical', '<=', 1.15, ''),
    ('ib_read_lat -e 64 B over the C library / tbrdma read-lat -e', 'lib_read_lat_64B_event.t_typical', 'read_lat_64B_event2.t_typical', None, None,
     'event mode: the second read-lat -e of the repetition, back to back'),
    # the engines over the C library against their own TCP transports, same run (docs/engines.md)
    ('ucx_perftest tag_bw 1 MiB rc_verbs over tbrdma / UCX tcp', 'ucx_rc_tag_bw_1MiB.bw', 'ucx_tcp_tag_bw_1MiB.bw', '>=', 1.2,
     'UCX 1.13, UCX_TLS=rc_verbs,ud_verbs:aux vs UCX_TLS=tcp, overall bandwidth'),
    ('ucx_perftest tag_lat 8 B rc_verbs over tbrdma / UCX tcp', 'ucx_rc_tag_lat_8B.lat', 'ucx_tcp_tag_lat_8B.lat', '<=', 1.0,
     'typical one-way latency'),
    ('MPI ping-pong 8 B, pml ucx over tbrdma / Open MPI TCP BTL', 'mpi_ucx.lat', 'mpi_tcp.lat', None, None,
     'cabi/examples/mpi_pingpong, half a round trip; ob1 + btl tcp,self'),
    ('MPI bandwidth 4 MiB, pml ucx over tbrdma / Open MPI TCP BTL', 'mpi_ucx.bw', 'mpi_tcp.bw', None, None, '8 messages in flight'),
    ('fi_pingpong 1 MiB verbs;ofi_rxm over tbrdma / tcp;ofi_rxm (MB/s)', 'fi_verbs_rxm_1MiB.bw', 'fi_tcp_rxm_1MiB.bw', None, None,
     'libfabric 1.17, rdm endpoints, one message in flight'),
    ('fi_pingpong 64 B verbs;ofi_rxm over tbrdma / tcp;ofi_rxm (usec/xfer)', 'fi_verbs_rxm_64B.oneway', 'fi_tcp_rxm_64B.oneway', None, None,
     'one-way latency'),
    # the same client through "tbrdma serve" / against a dedicated one-test server, same repetition (issue 18)
    ('serve / dedicated: write-bw 1 MiB, large segments', 'serve_write_bw_1MiB_large.bw', 'write_bw_1MiB_large.bw', '>=', 0.95,
     'serve started for the client; the dedicated run just before it'),
    ('serve / dedicated: write-bw 1 MiB, IB MTU 4096', 'serve_write_bw_1MiB.bw', 'write_bw_1MiB_b.bw', '>=', 0.95,
     'the dedicated run right after it (write_bw_1MiB_b)'),
    ('serve / dedicated: read-lat 64 B busy-poll t_typical', 'serve_read_lat_64B_poll.t_typical', 'read_lat_64B_poll.t_typical', '<=', 1.05, ''),
    ('serve / dedicated: read-lat 64 B busy-poll p99', 'serve_read_lat_64B_poll.p99', 'read_lat_64B_poll.p99', '<=', 1.05, ''),
    ('serve / dedicated: write-lat 64 B t_typical', 'serve_write_lat_64B.t_typical', 'write_lat_64B.t_typical', '<=', 1.05, ''),
    ('serve / dedicated: send-lat 64 B busy-poll t_typical', 'serve_send_lat_64B_poll.t_typical', 'send_lat_64B_poll.t_typical', '<=', 1.05, ''),
    # several QPs (issue 18): write-bw -q N against -q 1, 1 GiB each, same repetition
] + [(f'write-bw -q {q} / -q 1, {sn}', f'qps_write_bw_{sz}_q{q}.bw', f'qps_write_bw_{sz}_q1.bw', '>=', 1.0,
      'aggregate over the QPs; each QP writes its own slice of the buffer, as perftest')
     for sz, sn in (('64KiB', '64 KiB'), ('1MiB', '1 MiB')) for q in (2, 4, 8)] + [
    # loss (issue 18): nftables drops in both directions, the same for TCP and tbrdma
] + [(('OLD ' if pre else '') + f'write-bw {sn} / iperf3 TCP at {pct} loss' + (' (on input)' if w else ''),
      f'{pre}{w}loss{n}_write_bw_{sz}.bw', f'iperf3_tcp_{w}loss{n}.recv',
      None if pre else '>=', None if pre else 1.0,
      ('TBRDMA_OLD_BIN; ' if pre else '') + f'nft drops {n} per mille of the packets each namespace ' +
      ('receives from the other (the sender learns of it only from its peer, as on a lossy wire)' if w else
       'sends (TCP segments and UDP GSO batches alike; the sender is told at once)'))
     for w in ('', 'w') for pre in ('', 'old_') for n, pct in ((1, '0.1 %'), (10, '1 %'), (50, '5 %'))
     for sz, sn in (('64KiB', '64 KiB'), ('1MiB', '1 MiB'))] + [
    # the older binary (TBRDMA_OLD_BIN), same run
    ('OLD write-bw 1 MiB / iperf3 UDP 65000 B received', 'old_write_bw_1MiB.bw', 'iperf3_udp65000.recv', None, None, 'TBRDMA_OLD_BIN'),
    ('OLD read-lat 64 B event t_typical / sockperf blocking p50 RTT', 'old_read_lat_64B_event.t_typical',
     'sockperf_udp64_block.rtt_p50', None, None, 'TBRDMA_OLD_BIN'),
    ('OLD read-lat 64 B poll t_typical / sockperf busy-poll p50 RTT', 'old_read_lat_64B_poll.t_typical',
     'sockperf_udp64_poll.rtt_p50', None, None, 'TBRDMA_OLD_BIN'),
    ('OLD write-lat 64 B t_typical / libfabric udp;ofi_rxd one-way', 'old_write_lat_64B.t_typical', firxd, None, None, 'TBRDMA_OLD_BIN'),
]
reps = sorted({r for k in rows for r in rows[k]})
ratios = []
for name, nk, dk, op, tgt, note in R:
    if not op and nk.split('*')[0] not in rows:
        continue  # an extra whose numerator did not run (e.g. no TBRDMA_OLD_BIN)
    per = []
    for r in reps:
        n, d = side(nk, r), side(dk, r)
        if n and d and d[0]:
            per.append({'rep': r, 'ratio': n[0] / d[0], 'numerator': n[0], 'denominator': d[0],
                        'foreign_cpu_pct': max(n[1], d[1])})
    # headline: the median over the quiet repetitions (other processes used
    # <= QUIET_MAX % CPU during both sides), else the least disturbed one;
    # chosen by noise, never by result
    quiet = [x for x in per if x['foreign_cpu_pct'] <= qmax]
    if not quiet and per:
        quiet = [min(per, key=lambda x: (x['foreign_cpu_pct'], x['rep']))]
    best = None
    if quiet:
        best = {'ratio': statistics.median(x['ratio'] for x in quiet),
                'numerator': statistics.median(x['numerator'] for x in quiet),
                'denominator': statistics.median(x['denominator'] for x in quiet),
                'foreign_cpu_pct': max(x['foreign_cpu_pct'] for x in quiet),
                'rep': [x['rep'] for x in quiet]}
    met = None
    if best and op:
        met = best['ratio'] >= tgt if op == '>=' else best['ratio'] <= tgt
    rs = [x['ratio'] for x in per]
    ratios.append({'name': name, 'numerator_key': nk,
                   'denominator_key': dk if isinstance(dk, str) else
                   ('anchors: fi_pingpong tcp 1 MiB' if dk == ofitcp else 'anchors: fi_pingpong udp rdm (ofi_rxd) 64 B one-way'),
                   'denominator_measured': isinstance(dk, str), 'unit': unit(nk),
                   'ratio': best and best['ratio'], 'reps_used': best and best['rep'],
                   'numerator': best and best['numerator'], 'denominator': best and best['denominator'],
                   'foreign_cpu_pct': best and best['foreign_cpu_pct'],
                   'ratio_median': statistics.median(rs) if rs else None,
                   'ratio_min': min(rs) if rs else None, 'ratio_max': max(rs) if rs else None,
                   'per_rep': per, 'target': (op + ' ' + str(tgt)) if op else None, 'met': met, 'note': note})
fails = [dict(zip(('test', 'reason'), l.rstrip('\n').split('\t', 1))) for l in open(failf) if l.strip()]
doc = {'meta': meta, 'ratios': ratios, 'raw': raw, 'failures': fails, 'notes': {
    'B/s': 'bytes per second: tbrdma BW average MiB/s x 2^20, iperf3 bits_per_second / 8, fi_pingpong MB/sec x 1e6 (bytes of both directions, one message in flight)',
    'us': 'microseconds: sockperf rtt = full round trip (--full-rtt); read-lat t_typical = full round trip; write-lat and send-lat t_typical = half round trip; fi_pingpong oneway = usec/xfer = half round trip',
    'ratio': 'taken within each repetition (both sides measured back to back); "ratio" (and numerator, denominator) = median over the quiet repetitions (reps_used: foreign CPU <= QUIET_MAX), else the least disturbed one; ratio_median/min/max over all repetitions',
    'foreign_cpu_pct': 'CPU used by processes other than this script and its children during the measurement, % of all cores; above ~10 the figure is disturbed'}}
os.makedirs(os.path.dirname(os.path.abspath(out)) or '.', exist_ok=True)
with open(out, 'w') as f:
    json.dump(doc, f, indent=1)
    f.write('\n')

def fmt(v, u):
    if v is None:
        return 'n/a'
    if u == 'B/s':
        return '%.3f GB/s' % (v / 1e9)
    if u == 'us':
        return '%.1f µs' % v
    return '%g %s' % (v, u)
def f2(v):
    return 'n/a' if v is None else '%.2f' % v
print('tbrdma end to end on a simulated Thunderbolt link: %s' % meta.get('link'))
print('%s, %s repetitions, %s s, %s, %s' % (meta.get('date'), meta.get('reps'), meta.get('duration_s'),
      meta.get('tbrdma'), meta.get('go')))
print()
print('| ratio | value | all reps: median (min–max) | target | met | numerator | denominator | bg% |')
print('|---|---:|---|---|---|---:|---:|---:|')
for r in ratios:
    met = {True: 'yes', False: '**no**', None: '—'}[r['met']]
    den = fmt(r['denominator'], r['unit'])
    if not r['denominator_measured']:
        den += ' (from anchors, not measured in this run)'
    allr = 'n/a' if r['ratio_median'] is None else '%s (%s–%s)' % (f2(r['ratio_median']), f2(r['ratio_min']), f2(r['ratio_max']))
    bg = '' if r['foreign_cpu_pct'] is None else '%.0f' % r['foreign_cpu_pct']
    print('| %s | %s | %s | %s | %s | %s | %s | %s |' % (r['name'], f2(r['ratio']), allr, r['target'] or '—', met,
          fmt(r['numerator'], r['unit']), den, bg))
print()
print('| raw figure | median | min | max | per repetition (bg%) |')
print('|---|---:|---:|---:|---|')
for k in order:
    x = raw[k]
    if x['unit'] == 'count' or k.endswith('.sent'):
        continue
    per = ', '.join('%s (%s)' % (fmt(y['value'], x['unit']), '?' if y['foreign_cpu_pct'] is None else '%.0f' % y['foreign_cpu_pct'])
                    for y in x['by_rep'].values())
    print('| %s | %s | %s | %s | %s |' % (k, fmt(x['median'], x['unit']), fmt(x['min'], x['unit']), fmt(x['max'], x['unit']), per))
if fails:
    print('\nFAILED:')
    for f in fails:
        print('  %s: %s' % (f.get('test'), f.get('reason', '')[:200]))
print('\nvalue, numerator, denominator = medians over the quiet repetitions (bg <= %g%%; if none, the least disturbed one).'
      ' bg%% = CPU share of both cores used by other processes during a measurement (worst of those used).'
      ' Whole run: bg %s%%, load %s -> %s.' % (qmax, meta.get('foreign_cpu_pct'), meta.get('load_start'), meta.get('load_end')))
print('JSON: %s   raw logs: %s' % (out, meta.get('logdir')))
EOF
