#!/bin/bash
# Interop of tbrdma (host network namespace, 198.18.0.1) with the real Linux
# SoftRoCE driver rdma_rxe and the stock tools (ibv_rc_pingpong, perftest) in
# a qemu guest (198.18.0.2), both roles. One guest boot runs every selected
# test in turn; the guest and this script hand over with flag files in the
# run directory (the guest's /job, a 9p share). Every test's traffic is
# captured on the namespace's bridge and every RoCEv2 ICRC checked with
# interop/icrccheck. Prints a pass/fail table; exits 0 only if all passed.
#
# Usage (as root, from anywhere):
#   interop/run.sh [-o OUTDIR] [-k] [-l] [TEST...]
#     TEST     test names or shell patterns (default: all); -l lists them
#     -o DIR   results directory (default /var/tmp/tbrdma-interop/<time>)
#     -k       keep the namespace up afterwards
# Needs the rxe-vm guest image (../shared/tools/rxe-vm, build-image.sh) and
# uses its net-up.sh, run-pair.sh and net-down.sh. Only one run-pair.sh may
# run on a machine at a time.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
RXEVM=${RXEVM:-$(cd "$ROOT/../shared/tools/rxe-vm" 2>/dev/null && pwd || echo /work/shared/tools/rxe-vm)}
. "$RXEVM/common.sh"     # NETNS HOST_IP IP_A RUNS_DIR BRIDGE ...

OUT= KEEP=0 LIST=0
while getopts o:kl opt; do
    case $opt in o) OUT=$OPTARG ;; k) KEEP=1 ;; l) LIST=1 ;; *) exit 2 ;; esac
done
shift $((OPTIND-1))

G1='-d rxe0 -x $G -F --qp-timeout=20'   # perftest flags in the guest ($G: the IPv4 GID index)
# name | guest role | guest command | tbrdma arguments
# guest role "client": the guest connects to tbrdma (tbrdma serves);
# "server": the guest serves and tbrdma connects.
TESTS=(
"pingpong-64-tbserver|client|ibv_rc_pingpong -d rxe0 -g \$G -n 20 -s 64 -c $HOST_IP|pingpong --bind $HOST_IP -n 20 -s 64 -c"
"pingpong-8192-tbserver|client|ibv_rc_pingpong -d rxe0 -g \$G -n 20 -s 8192 -c $HOST_IP|pingpong --bind $HOST_IP -n 20 -s 8192 -c"
"pingpong-64-tbclient|server|ibv_rc_pingpong -d rxe0 -g \$G -n 20 -s 64 -c|pingpong --bind $HOST_IP -g 1 -n 20 -s 64 -c $IP_A"
"pingpong-8192-tbclient|server|ibv_rc_pingpong -d rxe0 -g \$G -n 20 -s 8192 -c|pingpong --bind $HOST_IP -g 1 -n 20 -s 8192 -c $IP_A"
"read-lat-tbclient|server|ib_read_lat $G1 -n 20 -s 64|read-lat --bind $HOST_IP -x 1 -n 20 -s 64 $IP_A"
"read-lat-8192-m1024-tbclient|server|ib_read_lat $G1 -m 1024 -n 20 -s 8192|read-lat --bind $HOST_IP -x 1 -m 1024 -n 20 -s 8192 $IP_A"
"atomic-fa-tbclient|server|ib_atomic_lat $G1 -n 20 -A FETCH_AND_ADD|atomic-lat --bind $HOST_IP -x 1 -n 20 -A FETCH_AND_ADD $IP_A"
"atomic-cs-tbclient|server|ib_atomic_lat $G1 -n 20 -A CMP_AND_SWAP|atomic-lat --bind $HOST_IP -x 1 -n 20 -A CMP_AND_SWAP $IP_A"
"write-bw-tbclient|server|ib_write_bw $G1 -n 20 -s 65536|write-bw --bind $HOST_IP -x 1 -n 20 -s 65536 $IP_A"
"read-lat-tbserver|client|ib_read_lat $G1 -n 20 -s 64 $HOST_IP|read-lat --bind $HOST_IP -x 1 -n 20 -s 64"
"read-lat-8192-m1024-tbserver|client|ib_read_lat $G1 -m 1024 -n 20 -s 8192 $HOST_IP|read-lat --bind $HOST_IP -x 1 -m 1024 -n 20 -s 8192"
"atomic-fa-tbserver|client|ib_atomic_lat $G1 -n 20 -A FETCH_AND_ADD $HOST_IP|atomic-lat --bind $HOST_IP -x 1 -n 20 -A FETCH_AND_ADD"
"atomic-cs-tbserver|client|ib_atomic_lat $G1 -n 20 -A CMP_AND_SWAP $HOST_IP|atomic-lat --bind $HOST_IP -x 1 -n 20 -A CMP_AND_SWAP"
"write-bw-tbserver|client|ib_write_bw $G1 -n 20 -s 65536 $HOST_IP|write-bw --bind $HOST_IP -x 1 -n 20 -s 65536"
"pingpong-4096-n500-tbserver|client|ibv_rc_pingpong -d rxe0 -g \$G -n 500 -c $HOST_IP|pingpong --bind $HOST_IP -n 500 -c"
"pingpong-4096-n500-tbclient|server|ibv_rc_pingpong -d rxe0 -g \$G -n 500 -c|pingpong --bind $HOST_IP -g 1 -n 500 -c $IP_A"
"write-bw-n300-tbclient|server|ib_write_bw $G1 -n 300 -s 65536|write-bw --bind $HOST_IP -x 1 -n 300 -s 65536 $IP_A"
"write-bw-n300-tbserver|client|ib_write_bw $G1 -n 300 -s 65536 $HOST_IP|write-bw --bind $HOST_IP -x 1 -n 300 -s 65536"
"send-lat-tbclient|server|ib_send_lat $G1 -n 20|send-lat --bind $HOST_IP -x 1 -n 20 $IP_A"
"send-lat-tbserver|client|ib_send_lat $G1 -n 20 $HOST_IP|send-lat --bind $HOST_IP -x 1 -n 20"
"send-lat-8192-m1024-tbclient|server|ib_send_lat $G1 -m 1024 -n 20 -s 8192|send-lat --bind $HOST_IP -x 1 -m 1024 -n 20 -s 8192 $IP_A"
"send-lat-8192-m1024-tbserver|client|ib_send_lat $G1 -m 1024 -n 20 -s 8192 $HOST_IP|send-lat --bind $HOST_IP -x 1 -m 1024 -n 20 -s 8192"
"send-bw-tbclient|server|ib_send_bw $G1 -n 20 -s 65536|send-bw --bind $HOST_IP -x 1 -n 20 -s 65536 $IP_A"
"send-bw-tbserver|client|ib_send_bw $G1 -n 20 -s 65536 $HOST_IP|send-bw --bind $HOST_IP -x 1 -n 20 -s 65536"
"send-bw-all-tbclient|server|ib_send_bw $G1 -a -n 5|send-bw --bind $HOST_IP -x 1 -a -n 5 $IP_A"
"write-lat-tbclient|server|ib_write_lat $G1 -n 20 -s 32|write-lat --bind $HOST_IP -x 1 -n 20 -s 32 $IP_A"
"write-lat-tbserver|client|ib_write_lat $G1 -n 20 -s 32 $HOST_IP|write-lat --bind $HOST_IP -x 1 -n 20 -s 32"
"write-lat-8192-m1024-tbclient|server|ib_write_lat $G1 -m 1024 -n 20 -s 8192|write-lat --bind $HOST_IP -x 1 -m 1024 -n 20 -s 8192 $IP_A"
"write-lat-8192-m1024-tbserver|client|ib_write_lat $G1 -m 1024 -n 20 -s 8192 $HOST_IP|write-lat --bind $HOST_IP -x 1 -m 1024 -n 20 -s 8192"
"read-bw-tbclient|server|ib_read_bw $G1 -n 20 -s 65536|read-bw --bind $HOST_IP -x 1 -n 20 -s 65536 $IP_A"
"read-bw-tbserver|client|ib_read_bw $G1 -n 20 -s 65536 $HOST_IP|read-bw --bind $HOST_IP -x 1 -n 20 -s 65536"
)

SEL=()
for t in "${TESTS[@]}"; do
    name=${t%%|*}
    if [ $# = 0 ]; then SEL+=("$t"); continue; fi
    for pat in "$@"; do
        # shellcheck disable=SC2053
        if [[ $name == $pat ]]; then SEL+=("$t"); break; fi
    done
done
if [ $LIST = 1 ]; then for t in "${TESTS[@]}"; do echo "${t%%|*}"; done; exit 0; fi
[ ${#SEL[@]} -gt 0 ] || die "no test matches: $*"
need_root

STAMP=$(date +%Y%m%d-%H%M%S)
OUT=${OUT:-/var/tmp/tbrdma-interop/$STAMP}
mkdir -p "$OUT"
NAME=tbrdma-interop
RUN=$RUNS_DIR/$NAME
DRIVER_PID=
cleanup() {
    [ -n "$DRIVER_PID" ] && kill "$DRIVER_PID" 2>/dev/null || true
    if [ -s "$OUT/.tcpdump.pid" ]; then kill -TERM "$(cat "$OUT/.tcpdump.pid")" 2>/dev/null || true; fi
    if [ $KEEP = 0 ]; then "$RXEVM/net-down.sh" >/dev/null 2>&1 || true; fi
}
trap cleanup EXIT

log "building tbrdma and icrccheck into $OUT"
(cd "$ROOT" && go build -o "$OUT/tbrdma" ./cmd/tbrdma && go build -o "$OUT/icrccheck" ./interop/icrccheck)
TB=$OUT/tbrdma
"$RXEVM/net-up.sh" >/dev/null

# --- the guest's job ----------------------------------------------------------
JOB=$OUT/guest-job.sh
{
    echo '. /job/lib.sh'
    echo 'G=$(wait_gid)'
    echo 'mkdir -p /job/res'
    echo 'show_rdma >/job/res/guest-rdma.txt 2>&1'
    echo '{ uname -r; dpkg-query -W rdma-core ibverbs-utils libibverbs1 ibverbs-providers perftest; } >/job/res/guest-versions.txt 2>&1'
    for t in "${SEL[@]}"; do
        IFS='|' read -r name role gcmd _ <<<"$t"
        echo "say 'test $name'"
        echo "echo \"CMD(guest $role): $gcmd\" >/job/res/$name.guest.txt"
        if [ "$role" = client ]; then
            echo "if wait_for host-$name 300; then"
            echo "  timeout 150 $gcmd >>/job/res/$name.guest.txt 2>&1; echo \$? >/job/res/$name.guest.rc"
            echo "else echo 98 >/job/res/$name.guest.rc; fi"
        else
            echo "( timeout 150 $gcmd >>/job/res/$name.guest.txt 2>&1; echo \$? >/job/res/$name.guest.rc ) &"
            echo "wait_listen_tcp 18515 && ready server-$name"
            echo "wait"
        fi
        echo "ready done-$name"
        echo "sleep 1"
    done
    echo 'say "rxe0 hw counters (non-zero):" >/job/res/guest-counters.txt'
    echo 'for f in /sys/class/infiniband/rxe0/ports/1/hw_counters/*; do v=$(cat $f); [ "$v" != 0 ] && echo "$(basename $f) $v"; done >>/job/res/guest-counters.txt'
    echo 'dmesg | grep -i rxe >/job/res/guest-dmesg.txt || true'
    echo 'exit 0'
} >"$JOB"

# --- the host side, test by test --------------------------------------------------
nsx() { ip netns exec "$NETNS" "$@"; }
wait_file() {  # wait_file PATH SECONDS
    local n=0
    while [ ! -e "$1" ]; do
        n=$((n+1)); [ $n -gt $(( $2 * 5 )) ] && return 1
        sleep 0.2
    done
}
start_capture() {  # start_capture PCAP
    ip netns exec "$NETNS" tcpdump -i "$BRIDGE" -Z root -s 0 -U --immediate-mode -B 32768 -n -w "$1" 'udp port 4791 or tcp port 18515' >"$1.log" 2>&1 &
    TCPDUMP_PID=$!
    echo $TCPDUMP_PID >"$OUT/.tcpdump.pid"
    for _ in $(seq 50); do grep -q listening "$1.log" && break; sleep 0.1; done
}
stop_capture() {
    sleep 1
    kill -TERM "$TCPDUMP_PID" 2>/dev/null || true
    wait "$TCPDUMP_PID" 2>/dev/null || true
    TCPDUMP_PID=
    rm -f "$OUT/.tcpdump.pid"
}
driver() {
    wait_file "$RUN/A.sh" 60 || { echo "run directory did not appear" >&2; return 1; }
    local t name role gcmd hargs pid rc
    for t in "${SEL[@]}"; do
        IFS='|' read -r name role gcmd hargs <<<"$t"
        start_capture "$OUT/$name.pcap"
        echo "CMD(tbrdma $([ "$role" = client ] && echo server || echo client) $HOST_IP): tbrdma $hargs" >"$OUT/$name.tbrdma.txt"
        rc=0
        if [ "$role" = client ]; then
            # shellcheck disable=SC2086
            ip netns exec "$NETNS" timeout 180 "$TB" $hargs >>"$OUT/$name.tbrdma.txt" 2>&1 &
            pid=$!
            for _ in $(seq 100); do
                nsx ss -Hltn "sport = :18515" | grep -q . && break
                kill -0 $pid 2>/dev/null || break
                sleep 0.1
            done
            : >"$RUN/flags/host-$name"
            wait $pid || rc=$?
        else
            if wait_file "$RUN/flags/server-$name" 300; then
                # shellcheck disable=SC2086
                nsx timeout 180 "$TB" $hargs >>"$OUT/$name.tbrdma.txt" 2>&1 || rc=$?
            else
                echo "guest server did not come up" >>"$OUT/$name.tbrdma.txt"; rc=97
            fi
        fi
        echo $rc >"$OUT/$name.tbrdma.rc"
        wait_file "$RUN/flags/done-$name" 300 || true
        stop_capture
        log "test $name: tbrdma exit $rc, guest exit $(cat "$RUN/res/$name.guest.rc" 2>/dev/null || echo none)"
    done
}

rm -rf "$RUN"
driver &
DRIVER_PID=$!
s=$(date +%s)
prc=0
"$RXEVM/run-pair.sh" -1 -n "$NAME" -w "$OUT/all.pcap" -t 1500 "$JOB" >"$OUT/run-pair.log" 2>&1 || prc=$?
# The driver ends with the guest's last test; do not let it wait for flags
# from a guest that has already powered off.
for _ in $(seq 100); do kill -0 "$DRIVER_PID" 2>/dev/null || break; sleep 0.2; done
kill "$DRIVER_PID" 2>/dev/null || true
drc=0; wait "$DRIVER_PID" || drc=$?
DRIVER_PID=
log "guest run finished in $(( $(date +%s) - s )) s (run-pair exit $prc, driver exit $drc)"
cp "$RUN"/res/* "$OUT"/ 2>/dev/null || true
cp "$RUN/A.out" "$OUT/guest-job.out" 2>/dev/null || true
cp "$RUN/console-A.log" "$OUT/guest-console.log" 2>/dev/null || true

# --- verdicts ----------------------------------------------------------------
fail=0
{
    echo "tbrdma interop with rdma_rxe ($(date -u +%Y-%m-%dT%H:%M:%SZ))"
    echo "guest: $(tr '\n' ' ' <"$OUT/guest-versions.txt" 2>/dev/null)"
    echo
    printf '%-30s %-7s %-7s %-7s %-9s %s\n' TEST GUEST TBRDMA ROCE ICRC RESULT
    for t in "${SEL[@]}"; do
        IFS='|' read -r name _ <<<"$t"
        g=$(cat "$OUT/$name.guest.rc" 2>/dev/null || echo none)
        h=$(cat "$OUT/$name.tbrdma.rc" 2>/dev/null || echo none)
        ic=FAIL pk=0
        if [ -s "$OUT/$name.pcap" ]; then
            if "$OUT/icrccheck" "$OUT/$name.pcap" >"$OUT/$name.icrc.txt" 2>&1; then ic=ok; fi
            pk=$(sed -n '1s/.*: \([0-9]*\) RoCEv2 packets.*/\1/p' "$OUT/$name.icrc.txt")
        fi
        res=PASS
        if [ "$g" != 0 ] || [ "$h" != 0 ] || [ "$ic" != ok ]; then res=FAIL; fail=1; fi
        printf '%-30s %-7s %-7s %-7s %-9s %s\n' "$name" "$g" "$h" "${pk:-0}" "$ic" "$res"
    done
    echo
    "$OUT/icrccheck" -q "$OUT/all.pcap" 2>&1 || true
    # A second, independent ICRC implementation (Python, stdlib only).
    python3 "$RXEVM/pcap-summary.py" "$OUT/all.pcap" 2>&1 | sed -n 2p || true
} | tee "$OUT/summary.txt"
echo "results in $OUT"
[ $fail = 0 ] && [ $prc = 0 ]
