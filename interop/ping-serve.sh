#!/bin/bash
# Interop of "tbrdma ping" and "tbrdma serve" with the stock rping on rdma_rxe
# in one qemu guest (A = 198.18.0.2); tbrdma runs in netns tbhost on
# 198.18.0.1.
#   1. guest: rping -s -a 198.18.0.2 -v -C 10   host: tbrdma ping -c 10 198.18.0.2
#   2. guest: rping -c -a 198.18.0.1 -v -C 10   host: tbrdma serve --bind 198.18.0.1 -v
# Usage (root): interop/ping-serve.sh [OUTDIR]
# Only one run-pair.sh may run on the machine at a time.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
RXEVM=${RXEVM:-/work/shared/tools/rxe-vm}
. "$RXEVM/common.sh"
OUT=${1:-/var/tmp/tbrdma-ping/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
NAME=tbrdma-ping
RUN=$RUNS_DIR/$NAME
(cd "$ROOT" && go build -o "$OUT/tbrdma" ./cmd/tbrdma) || exit 1
"$RXEVM/net-up.sh" >/dev/null

JOB=$OUT/guest-job.sh
cat >"$JOB" <<'JOBEOF'
. /job/lib.sh
G=$(wait_gid)
say "gid index $G"
say "part 1: guest rping server"
rping -s -a 198.18.0.2 -v -C 10 >/job/guest-server.out 2>&1 &
pid=$!
wait_listen_cm 7174 && ready server
wait_for tbclientdone 180
kill $pid 2>/dev/null; wait $pid; echo $? >/job/guest-server.rc
say "part 2: guest rping client"
if wait_for tbserver 120; then
  timeout 60 rping -c -a 198.18.0.1 -v -C 10 >/job/guest-client.out 2>&1; echo $? >/job/guest-client.rc
fi
ready done
exit 0
JOBEOF

wait_file() { local n=0; while [ ! -e "$1" ]; do n=$((n+1)); [ $n -gt $(( $2 * 5 )) ] && return 1; sleep 0.2; done; }
driver() {
    wait_file "$RUN/A.sh" 60 || return 1
    if wait_file "$RUN/flags/server" 300; then
        ip netns exec "$NETNS" timeout 90 "$OUT/tbrdma" ping -c 10 -i 0.2 --bind "$HOST_IP" "$IP_A" >"$OUT/tb-ping.out" 2>"$OUT/tb-ping.err"
        echo $? >"$OUT/tb-ping.rc"
    fi
    : >"$RUN/flags/tbclientdone"
    ip netns exec "$NETNS" "$OUT/tbrdma" serve --bind "$HOST_IP" -v >"$OUT/tb-serve.out" 2>"$OUT/tb-serve.err" &
    local spid=$!
    local n=0
    until grep -q "listening on" "$OUT/tb-serve.err" 2>/dev/null; do
        n=$((n+1)); [ $n -gt 100 ] && break; sleep 0.1
    done
    : >"$RUN/flags/tbserver"
    wait_file "$RUN/flags/done" 150
    kill -INT $spid
    wait $spid; echo $? >"$OUT/tb-serve.rc"
}
rm -rf "$RUN"
driver &
DPID=$!
"$RXEVM/run-pair.sh" -1 -n "$NAME" -w "$OUT/all.pcap" -f 'udp port 4791' -t 600 "$JOB" >"$OUT/run-pair.log" 2>&1
prc=$?
for _ in $(seq 50); do kill -0 $DPID 2>/dev/null || break; sleep 0.2; done
kill $DPID 2>/dev/null; wait $DPID 2>/dev/null
cp "$RUN"/guest-*.out "$RUN"/guest-*.rc "$RUN/A.out" "$RUN/console-A.log" "$OUT"/ 2>/dev/null
"$RXEVM/net-down.sh" >/dev/null 2>&1
echo "run-pair exit $prc"
for f in guest-server tb-ping guest-client tb-serve; do
    echo "== $f rc=$(cat "$OUT/$f.rc" 2>/dev/null || echo none)"
    cat "$OUT/$f.out" 2>/dev/null | head -20
    [ -s "$OUT/$f.err" ] && { echo "-- stderr"; head -20 "$OUT/$f.err"; }
done
echo "results in $OUT"
