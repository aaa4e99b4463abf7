#!/bin/bash
# The interop suite: tbrdma (in a host network namespace, 198.18.0.1) against
# the stock Linux SoftRoCE driver rdma_rxe and the stock tools (ibv_*_pingpong,
# perftest, rping, ...) in a Debian qemu guest (198.18.0.2), each pairing in
# both roles. The pairings are the lines of interop/matrix.txt. The guest is
# Debian 12 (bookworm) by default, Debian 13 (trixie) with -s trixie; each
# suite has its own image, namespace, addresses (198.18.13.0/24 for trixie)
# and results directory (interop/vm/config.sh).
#
# One command does everything: installs missing host packages (apt), builds
# the guest image unless the cached one is current (interop/vm/build-image.sh),
# builds tbrdma once, boots one guest that runs every selected pairing in
# turn, captures each pairing on the bridge, checks every RoCEv2 packet
# (ICRC and structure with interop/icrccheck, decode with tshark) and prints
# a pass/fail table with each tool's verdict and the data checks. Exits 0
# only if every pairing passed.
#
# Usage (as root):  interop/run.sh [-s SUITE] [-o DIR] [-f MATRIX] [-p] [-k] [-l] [PATTERN...]
#   PATTERN  pairing names or shell patterns (default: all); -l lists them
#   -s SUITE the guest's Debian release: bookworm (default) or trixie; the
#            same as TBVM_SUITE=SUITE
#   -o DIR   results directory (default /var/tmp/tbrdma-interop/<date-time>,
#            for trixie /var/tmp/tbrdma-interop-trixie/<date-time>)
#   -f FILE  another matrix file (default interop/matrix.txt)
#   -p       prune: delete the captures of pairings that passed (CI)
#   -k       keep the network namespace afterwards
# Environment: PAIR_TIMEOUT (seconds per tool run, default 180), TBRDMA_BIN
# (use this tbrdma binary instead of building ./cmd/tbrdma), the TBVM_*
# settings of interop/vm/config.sh (cache directory, addresses, ...).
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)

OUT= PRUNE=0 KEEP_NET=0 LIST=0 MATRIX=$HERE/matrix.txt
PAIR_TIMEOUT=${PAIR_TIMEOUT:-180}
while getopts s:o:f:pkl opt; do
    case $opt in
    s) TBVM_SUITE=$OPTARG ;; o) OUT=$OPTARG ;; f) MATRIX=$OPTARG ;; p) PRUNE=1 ;; k) KEEP_NET=1 ;; l) LIST=1 ;;
    *) echo "usage: $0 [-s bookworm|trixie] [-o DIR] [-f MATRIX] [-p] [-k] [-l] [PATTERN...]" >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
# The suite picks the defaults of every TBVM_* setting (config.sh); the
# scripts run below (host-deps.sh, build-image.sh) get the same values.
export TBVM_SUITE
. "$HERE/vm/lib.sh"
export TBVM_CACHE TBVM_MIRROR TBVM_PACKAGES TBVM_VERSION_PACKAGES TBVM_HOST_IP TBVM_GUEST_IP

# ------------------------------------------------------------------ matrix
[ -r "$MATRIX" ] || tbvm_die "cannot read the matrix file $MATRIX"
NAMES=() SERVER=() READY=() GCMD=() TARGS=()
SKIPPED=() SKIPWHY=()   # selected pairings a "skip" line takes out on this suite
trim() { local s=$1; s=${s#"${s%%[![:space:]]*}"}; s=${s%"${s##*[![:space:]]}"}; printf '%s' "$s"; }
# "skip SUITE | PATTERN | REASON" lines (see matrix.txt): read first, as
# they may stand anywhere. Only those for this run's suite count.
SKIP_PAT=() SKIP_REASON=() SKIP_LINE=() SKIP_USED=()
lineno=0
while IFS= read -r line || [ -n "$line" ]; do
    lineno=$((lineno + 1))
    [[ $(trim "$line") =~ ^skip[[:space:]] ]] || continue
    IFS='|' read -r f1 f2 f3 extra <<<"$line"
    suite=$(trim "${f1#*skip}") pat=$(trim "${f2:-}") reason=$(trim "${f3:-}")
    [ -z "${extra:-}" ] && [ -n "$pat" ] && [ -n "$reason" ] ||
        tbvm_die "$MATRIX line $lineno: a skip line is: skip SUITE | NAME-PATTERN | the reason it cannot run there (all three needed)"
    [[ $suite == bookworm || $suite == trixie ]] || tbvm_die "$MATRIX line $lineno: skip names suite '$suite'; the suites are bookworm and trixie"
    [ "$suite" = "$TBVM_SUITE" ] || continue
    SKIP_PAT+=("$pat") SKIP_REASON+=("$reason") SKIP_LINE+=("$lineno") SKIP_USED+=(0)
done <"$MATRIX"
# skip_reason NAME: sets WHY to the reason of the first skip line whose
# pattern matches NAME ("" when none does).
skip_reason() {
    local k
    WHY=
    for k in "${!SKIP_PAT[@]}"; do
        # shellcheck disable=SC2053
        if [[ $1 == ${SKIP_PAT[$k]} ]]; then SKIP_USED[$k]=1 WHY=${SKIP_REASON[$k]}; return; fi
    done
}
lineno=0
while IFS= read -r line || [ -n "$line" ]; do
    lineno=$((lineno + 1))
    case $(trim "$line") in '' | '#'* | 'skip '* | "skip	"*) continue ;; esac
    IFS='|' read -r f1 f2 f3 f4 f5 extra <<<"$line"
    name=$(trim "$f1") server=$(trim "$f2") ready=$(trim "$f3") gcmd=$(trim "$f4") targs=$(trim "${f5:-}")
    [ -z "${extra:-}" ] && [ -n "$targs" ] || tbvm_die "$MATRIX line $lineno: want 5 fields separated by |: name | server | ready | guest command | tbrdma arguments"
    [[ $name =~ ^[A-Za-z0-9._-]+$ ]] || tbvm_die "$MATRIX line $lineno: name '$name' may only hold letters, digits, '.', '_' and '-'"
    [[ $server == guest || $server == tbrdma ]] || tbvm_die "$MATRIX line $lineno: server must be 'guest' or 'tbrdma', not '$server'"
    [[ $ready =~ ^(tcp|cm):[0-9]+$ ]] || tbvm_die "$MATRIX line $lineno: ready must be tcp:PORT or cm:PORT, not '$ready'"
    for n in "${NAMES[@]}"; do [ "$n" != "$name" ] || tbvm_die "$MATRIX line $lineno: pairing $name is there twice"; done
    sel=0
    if [ $# = 0 ]; then sel=1; fi
    for pat in "$@"; do
        # shellcheck disable=SC2053
        [[ $name == $pat ]] && sel=1
    done
    skip_reason "$name"
    why=$WHY
    if [ $LIST = 1 ]; then
        printf '%-32s %-7s %s%s\n' "$name" "$server" "${gcmd%% *}" "${why:+   (skipped on $TBVM_SUITE: $why)}"
        continue
    fi
    [ $sel = 1 ] || continue
    if [ -n "$why" ]; then
        SKIPPED+=("$name") SKIPWHY+=("$why")
        continue
    fi
    NAMES+=("$name") SERVER+=("$server") READY+=("$ready") GCMD+=("$gcmd") TARGS+=("$targs")
done <"$MATRIX"
for k in "${!SKIP_PAT[@]}"; do
    [ "${SKIP_USED[$k]}" = 1 ] || tbvm_die "$MATRIX line ${SKIP_LINE[$k]}: the skip pattern '${SKIP_PAT[$k]}' matches no pairing: fix it or delete the line"
done
[ $LIST = 1 ] && exit 0
[ ${#NAMES[@]} -gt 0 ] || [ ${#SKIPPED[@]} -gt 0 ] || tbvm_die "no pairing in $MATRIX matches: $* (interop/run.sh -l lists them)"
[ ${#NAMES[@]} -gt 0 ] || tbvm_die "every selected pairing is skipped on $TBVM_SUITE (${SKIPPED[*]}): nothing to run (interop/run.sh -s $TBVM_SUITE -l shows why)"

tbvm_need_root "interop/run.sh"
T_START=$SECONDS
OUT=${OUT:-$TBVM_OUT_BASE/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT" || tbvm_die "cannot create the results directory $OUT"
OUT=$(cd "$OUT" && pwd)
RUN=$OUT/guest   # the guest's /job
rm -rf "$RUN"
mkdir -p "$RUN/flags" "$RUN/res"
HOST=$TBVM_HOST_IP GUEST=$TBVM_GUEST_IP
PERFTEST="--bind $HOST -x 0 -F --qp-timeout=20"   # for the tbrdma arguments in the matrix (the namespace has no IPv6: one GID, the IPv4 one)
LIBPERF="-x 1 -F --qp-timeout=20"                 # for stock perftest over the library (exec lines)
# UCX over rc_verbs (UD for its handshake) and over ud_verbs, as the guest
# has them too (ucx_perftest pairings; docs/engines.md for the settings).
UCX="UCX_TLS=rc_verbs,ud_verbs:aux UCX_UD_VERBS_ETH_DGID_CHECK=n UCX_LOG_LEVEL=info"
UCXUD="UCX_TLS=ud_verbs UCX_UD_VERBS_ETH_DGID_CHECK=n UCX_LOG_LEVEL=info"
LIB=0   # some pairing runs a stock tool over tbrdma's C library ("exec" lines)
for t in "${TARGS[@]}"; do [[ $t == exec* ]] && LIB=1; done
TB_PID=
cleanup() {
    [ -n "$TB_PID" ] && kill -KILL "$TB_PID" 2>/dev/null
    [ -n "${TBVM_TCPDUMP_PID:-}" ] && kill -TERM "$TBVM_TCPDUMP_PID" 2>/dev/null
    tbvm_stop_guest
    [ $KEEP_NET = 1 ] || tbvm_net_down
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------- prepare
"$HERE/vm/host-deps.sh" || exit 1
t0=$SECONDS
"$HERE/vm/build-image.sh" || exit 1
T_IMAGE=$((SECONDS - t0))
if [ -n "${TBRDMA_BIN:-}" ]; then
    tbvm_log "using the tbrdma binary $TBRDMA_BIN (TBRDMA_BIN); building icrccheck into $OUT"
    cp "$TBRDMA_BIN" "$OUT/tbrdma" || tbvm_die "cannot copy TBRDMA_BIN=$TBRDMA_BIN"
else
    tbvm_log "building tbrdma and icrccheck into $OUT"
    (cd "$ROOT" && go build -o "$OUT/tbrdma" ./cmd/tbrdma) || tbvm_die "go build ./cmd/tbrdma failed (see above); fix the build first"
fi
(cd "$ROOT" && go build -o "$OUT/icrccheck" ./interop/icrccheck) || tbvm_die "go build ./interop/icrccheck failed (see above)"
if [ $LIB = 1 ]; then
    # The exec pairings: "tbrdma exec" finds the library in lib/ beside
    # the binary. build.sh builds both; keep TBRDMA_BIN's tbrdma if given.
    tbvm_log "building tbrdma's C library into $OUT/lib"
    keep=
    [ -n "${TBRDMA_BIN:-}" ] && keep=$OUT/tbrdma.keep && cp "$OUT/tbrdma" "$keep"
    (cd "$ROOT" && cabi/build.sh "$OUT") >"$OUT/cabi-build.log" 2>&1 || { cat "$OUT/cabi-build.log" >&2; tbvm_die "cabi/build.sh failed (see above)"; }
    [ -n "$keep" ] && mv "$keep" "$OUT/tbrdma"
fi
tbvm_net_up

# ------------------------------------------------------------ guest's job
{
    cat <<EOF
. /job/lib.sh
HOST=$HOST
VERSION_PACKAGES="$TBVM_VERSION_PACKAGES"
EOF
    cat <<'EOF'
G=$(gid_index) || exit 1
PERFTEST="-d rxe0 -x $G -F --qp-timeout=20"
UCX="UCX_TLS=rc_verbs,ud_verbs:aux UCX_UD_VERBS_ETH_DGID_CHECK=n UCX_LOG_LEVEL=info"
UCXUD="UCX_TLS=ud_verbs UCX_UD_VERBS_ETH_DGID_CHECK=n UCX_LOG_LEVEL=info"
# A ucx_perftest linked with Open MPI (trixie's UCX 1.18) defaults to MPI
# mode (-P 1), and run alone it exits 1 right after start: Open MPI's OFI
# (libfabric) components abort ("BTL OFI will now abort"). -P 0 and Open
# MPI kept off libfabric make it a plain socket-exchange ucx_perftest like
# bookworm's (1.13, no MPI, no -P option; both variables empty there).
NOMPI= NOMPI_ENV=
if ldd /usr/bin/ucx_perftest 2>/dev/null | grep -q libmpi; then
    NOMPI="-P 0" NOMPI_ENV="OMPI_MCA_btl=self OMPI_MCA_mtl=^ofi OMPI_MCA_pml=ob1"
fi
say "rxe0 is up, IPv4 GID index $G"
{
    echo "kernel $(uname -r)"
    dpkg-query -W -f '${Package} ${Version}\n' $VERSION_PACKAGES
    rdma link show
    ibv_devinfo -d rxe0 | grep -E 'fw_ver|state|active_mtu'
} >/job/res/versions.txt 2>&1
flag booted
EOF
    for i in "${!NAMES[@]}"; do
        name=${NAMES[$i]} gcmd=${GCMD[$i]}
        echo
        echo "say 'pairing $name'"
        echo "wait_flag begin-$name 900 || exit 1"
        echo "echo \"$gcmd\" >/job/res/$name.cmd"
        # Each tool runs in a session of its own (setsid), so that after
        # the pairing nothing of it can stay behind unseen: reap_session
        # records and kills what is left (job-lib.sh), and a failed pairing
        # leaves the guest's state in /job/res/NAME.diag.
        if [ "${SERVER[$i]}" = guest ]; then
            cat <<EOF
setsid timeout $PAIR_TIMEOUT $gcmd >/job/res/$name.out 2>&1 &
pid=\$!
if wait_ready ${READY[$i]} \$pid; then flag ready-$name; else flag noready-$name; fi
wait_flag client-done-$name $((PAIR_TIMEOUT + 60))
n=0
while kill -0 \$pid 2>/dev/null && [ \$n -lt 75 ]; do sleep 0.2; n=\$((n + 1)); done
if kill -0 \$pid 2>/dev/null; then say "the server still runs 15 s after tbrdma ended: stopping it"; kill \$pid; fi
wait \$pid
rc=\$?
echo \$rc >/job/res/$name.rc
EOF
        else
            cat <<EOF
if wait_flag ready-$name $((PAIR_TIMEOUT + 60)); then
    setsid timeout $PAIR_TIMEOUT $gcmd >/job/res/$name.out 2>&1 &
    pid=\$!
    wait \$pid
    rc=\$?
    echo \$rc >/job/res/$name.rc
else
    pid= rc=98
    echo 98 >/job/res/$name.rc
fi
EOF
        fi
        echo "[ \$rc = 0 ] || guest_diag >/job/res/$name.diag 2>&1"
        echo "[ -z \"\$pid\" ] || reap_session \$pid >/job/res/$name.leftover"
        echo "flag done-$name"
    done
    cat <<'EOF'

for f in /sys/class/infiniband/rxe0/ports/1/hw_counters/*; do
    v=$(cat "$f")
    [ "$v" = 0 ] || echo "$(basename "$f") $v"
done >/job/res/rxe-counters.txt
dmesg | grep -i -e rxe -e infiniband >/job/res/dmesg.txt
exit 0
EOF
} >"$RUN/job.sh"

# ------------------------------------------------------------- host's side
qemu_alive() { [ -n "$TBVM_QEMU_PID" ] && kill -0 "$TBVM_QEMU_PID" 2>/dev/null; }
# host_wait SECONDS FLAG...: until one of the flags exists; fails when the
# time is up or the guest is gone.
host_wait() {
    local limit=$1 n=0 f
    shift
    while :; do
        for f in "$@"; do [ -e "$RUN/flags/$f" ] && return 0; done
        qemu_alive || { sleep 0.5; for f in "$@"; do [ -e "$RUN/flags/$f" ] && return 0; done; return 1; }
        [ $n -ge $((limit * 5)) ] && return 1
        sleep 0.2
        n=$((n + 1))
    done
}
# host_ready SPEC PID: until tbrdma (PID) listens. tcp:PORT: a TCP listener in
# the namespace; cm:PORT: tbrdma's rdma_cm listener lives on its UDP 4791
# socket, so wait for that and give it a second to register the service.
host_ready() {
    local n=0
    while kill -0 "$2" 2>/dev/null && [ $n -lt 150 ]; do
        case $1 in
        tcp:*) tbvm_ns ss -Hltn "sport = :${1#tcp:}" | grep -q . && return 0 ;;
        cm:*) tbvm_ns ss -Hlun "sport = :4791" | grep -q . && { sleep 1; return 0; } ;;
        esac
        sleep 0.2
        n=$((n + 1))
    done
    return 1
}
# host_reap: the processes still in the namespace after a pairing, but for
# the guest (qemu) and the capture (tcpdump), one line each, then SIGKILL
# for them: everything else there was started by the pairing, and a tool
# that outlived it would hold UDP port 4791 or its TCP port for the next.
host_reap() {
    local p left=()
    for p in $(ip netns pids "$TBVM_NETNS" 2>/dev/null); do
        [ "$p" = "$TBVM_QEMU_PID" ] || [ "$p" = "${TBVM_TCPDUMP_PID:-}" ] && continue
        [ -e "/proc/$p" ] || continue
        left+=("$p")
        echo "pid $p ($(ps -o stat=,etimes=,wchan:24= -p "$p" 2>/dev/null | xargs)): $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null)"
    done
    [ ${#left[@]} = 0 ] && return 0
    kill -KILL "${left[@]}" 2>/dev/null
    local n=0
    while [ $n -lt 50 ]; do
        for p in "${left[@]}"; do [ -e "/proc/$p" ] && break; p=; done
        [ -z "$p" ] && return 0
        sleep 0.2
        n=$((n + 1))
    done
    echo "still there 10 s after SIGKILL: ${left[*]}"
}
run_pairing() {  # run_pairing INDEX
    local i=$1 name=${NAMES[$1]} rc=0 n targs t0=$SECONDS
    eval "targs=(${TARGS[$i]})"
    mkdir -p "$OUT/$name"
    printf 'tbrdma %s\n' "${targs[*]}" >"$OUT/$name/tbrdma.cmd"
    tbvm_capture_start "$OUT/$name/capture.pcap"
    : >"$RUN/flags/begin-$name"
    if [ "${SERVER[$i]}" = guest ]; then
        if host_wait $((PAIR_TIMEOUT + 60)) "ready-$name" "noready-$name"; then
            (cd "$OUT" && timeout "$PAIR_TIMEOUT" ip netns exec "$TBVM_NETNS" ./tbrdma "${targs[@]}") >"$OUT/$name/tbrdma.out" 2>&1
            rc=$?
        else
            echo "interop: the guest's server never got ready" >"$OUT/$name/tbrdma.out"
            rc=97
        fi
        : >"$RUN/flags/client-done-$name"
        host_wait 60 "done-$name"
    else
        (cd "$OUT" && exec timeout "$PAIR_TIMEOUT" ip netns exec "$TBVM_NETNS" ./tbrdma "${targs[@]}") >"$OUT/$name/tbrdma.out" 2>&1 &
        TB_PID=$!
        host_ready "${READY[$i]}" "$TB_PID" ||
            echo "interop: tbrdma did not listen (${READY[$i]}) within 30 s" >>"$OUT/$name/tbrdma.out"
        : >"$RUN/flags/ready-$name"
        host_wait $((PAIR_TIMEOUT + 60)) "done-$name"
        n=0
        while kill -0 "$TB_PID" 2>/dev/null && [ $n -lt 25 ]; do sleep 0.2; n=$((n + 1)); done
        if kill -0 "$TB_PID" 2>/dev/null; then
            kill -INT "$TB_PID"
            n=0
            while kill -0 "$TB_PID" 2>/dev/null && [ $n -lt 25 ]; do sleep 0.2; n=$((n + 1)); done
            kill -KILL "$TB_PID" 2>/dev/null
        fi
        wait "$TB_PID"
        rc=$?
        TB_PID=
    fi
    echo "$rc" >"$OUT/$name/tbrdma.rc"
    host_reap >"$OUT/$name/host.leftover"
    tbvm_capture_stop "$OUT/$name/capture.pcap" >"$OUT/$name/dropped"
    tbvm_log "pairing $name: tbrdma exit $rc, guest exit $(cat "$RUN/res/$name.rc" 2>/dev/null || echo none) ($((SECONDS - t0)) s)"
}

JOB_LIMIT=$((300 + ${#NAMES[@]} * (PAIR_TIMEOUT + 90)))
tbvm_log "booting the guest for ${#NAMES[@]} pairing(s); results in $OUT"
t0=$SECONDS
tbvm_boot "$RUN" "$JOB_LIMIT"
if host_wait 300 booted; then
    tbvm_log "guest ready after $((SECONDS - t0)) s"
    for i in "${!NAMES[@]}"; do
        qemu_alive || { tbvm_log "the guest is gone; skipping the remaining pairings"; break; }
        run_pairing "$i"
    done
else
    tbvm_log "the guest did not come up (console: $RUN/console.log, job output: $RUN/job.out)"
fi
tbvm_wait_guest 120 || true
T_GUEST=$((SECONDS - t0))
[ $KEEP_NET = 1 ] || tbvm_net_down
cp "$RUN"/res/versions.txt "$RUN"/res/rxe-counters.txt "$RUN"/res/dmesg.txt "$OUT"/ 2>/dev/null
for name in "${NAMES[@]}"; do
    mkdir -p "$OUT/$name"
    cp "$RUN/res/$name.out" "$OUT/$name/guest.out" 2>/dev/null
    cp "$RUN/res/$name.rc" "$OUT/$name/guest.rc" 2>/dev/null
    cp "$RUN/res/$name.cmd" "$OUT/$name/guest.cmd" 2>/dev/null
    cp "$RUN/res/$name.diag" "$OUT/$name/guest.diag" 2>/dev/null
    cp "$RUN/res/$name.leftover" "$OUT/$name/guest.leftover" 2>/dev/null
done

# ---------------------------------------------------------------- checks
# opt FLAG DEFAULT WORDS...: the value after FLAG in a command line.
opt() {
    local f=$1 d=$2 prev=
    shift 2
    for w in "$@"; do
        [ "$prev" = "$f" ] && { echo "$w"; return; }
        prev=$w
    done
    echo "$d"
}
has() { local f=$1 w; shift; for w in "$@"; do [ "$w" = "$f" ] && return 0; done; return 1; }

# rping_lines SIZE FILE: "GOOD BAD FIRSTBAD" for rping's "ping data:" lines,
# each compared with rping's pattern: "rdma-ping-K: " then the characters
# from 'A'+K%58 upwards, wrapping from 'z' to 'A', up to SIZE-1 bytes.
rping_lines() {
    awk -v size="$1" '
        /ping data: rdma-ping-[0-9]+: / {
            s = $0; sub(/.*ping data: /, "", s)
            k = s; sub(/^rdma-ping-/, "", k); sub(/:.*/, "", k); k += 0
            want = "rdma-ping-" k ": "; c = 65 + k % 58
            for (i = length(want); i < size - 1; i++) { want = want sprintf("%c", c); if (++c > 122) c = 65 }
            if (s == want) good++; else { bad++; if (first == "") first = "line " FNR ": " s }
        }
        END { printf "%d %d %s\n", good, bad, first }' "$2"
}

# perf_rows FILE ITERS: "ROWS BADITERS" for perftest-style result rows
# ("#bytes #iterations figures..."; ITERS empty: any count).
perf_rows() {
    # N "timed" (-D): a row counts what completed in the window; it must
    # be more than 0.
    awk -v n="$2" '$1 ~ /^[0-9]+$/ && $2 ~ /^[0-9]+$/ && $3 ~ /^[0-9.]+$/ && NF >= 4 {
            rows++; if (n == "timed" ? $2 == 0 : n != "" && $2 != n) bad++ }
        END { printf "%d %d\n", rows, bad }' "$1"
}

# lat_dur_rows FILE: how many of FILE's result rows are not a latency
# duration row (#bytes #iterations t_avg tps: 4 fields).
lat_dur_rows() {
    awk '$1 ~ /^[0-9]+$/ && $2 ~ /^[0-9]+$/ && $3 ~ /^[0-9.]+$/ && NF >= 4 && NF != 4 { bad++ }
        END { print bad + 0 }' "$1"
}

# all_rows GUEST_OUT WORDS...: the rows -a makes: 23 (2 B … 8 MiB), or over
# UD (-c UD) one per size from 2 B up to the MTU the guest's header shows.
all_rows() {
    local g=$1 mtu n=0 s=2
    shift
    [ "$(opt -c RC "$@")" = UD ] || { echo 23; return; }
    mtu=$(sed -n 's/^ Mtu *: \([0-9]*\)\[B\].*/\1/p' "$g" | head -n 1)
    while [ "$s" -le "${mtu:-0}" ]; do n=$((n + 1)) s=$((s * 2)); done
    echo "$n"
}

# receive_only INDEX: whether tbrdma sends no RoCEv2 packet in the pairing:
# the server of a perftest bandwidth test over UC or UD (-c), which only
# receives (UC and UD have no ACKs).
receive_only() {
    local gw c
    read -r -a gw <<<"${GCMD[$1]}"
    c=$(opt -c RC "${gw[@]}")
    [ "${SERVER[$1]}" = tbrdma ] && [[ ${gw[0]} == ib_*_bw ]] && [ "$c" != RC ]
}

# perf_sums FILE: the figures (peak, average, rate) of FILE's perftest-style
# result rows, one row per line.
perf_sums() {
    awk '$1 ~ /^[0-9]+$/ && $2 ~ /^[0-9]+$/ && $3 ~ /^[0-9.]+$/ && NF >= 4 { print $3, $4, $5 }' "$1"
}

# data_check NAME: sets DATA_OK (1/0) and DATA (what was checked), from the
# guest tool's and tbrdma's output. The check depends on the guest tool.
data_check() {
    local name=$1 i=$2 g="$OUT/$1/guest.out" t="$OUT/$1/tbrdma.out" gw tw tool
    read -r -a gw <<<"${GCMD[$i]}"
    eval "tw=(${TARGS[$i]})"
    tool=${gw[0]}
    if [ "$tool" = env ]; then  # env $UCX ucx_perftest ...: the tool after the settings
        for w in "${gw[@]:1}"; do [[ $w == \$* || $w == *=* ]] || { tool=$w; break; }; done
    fi
    DATA_OK=0 DATA=
    [ -f "$g" ] && [ -f "$t" ] || { DATA="no output"; return; }
    case $tool in
    ibv_*_pingpong)
        local n gi ti inval
        n=$(opt -n 1000 "${gw[@]}")
        gi=$(grep -c "^$n iters in " "$g") ti=$(grep -c "^$n iters in " "$t")
        inval=$(cat "$g" "$t" | grep -ci 'invalid data\|bad buffer\|mismatch')
        DATA="$n iters x2"
        has -c "${gw[@]}" && DATA="$DATA, -c buffers"
        [ "$gi" = 1 ] && [ "$ti" = 1 ] && [ "$inval" = 0 ] && DATA_OK=1
        [ $DATA_OK = 1 ] || DATA="iters line: guest $gi, tbrdma $ti; bad-data lines $inval"
        ;;
    ib_*)
        local n want gr tr gb tb q
        n=$(opt -n "" "${gw[@]}")
        q=$(opt -q 1 "${gw[@]}")   # -q: a row counts -n on every QP
        [ -n "$n" ] && n=$((n * q))
        has -D "${gw[@]}" && n=timed  # -D: the count is the window's, not -n
        want=1
        has -a "${gw[@]}" && want=$(all_rows "$g" "${gw[@]}")
        read -r gr gb <<<"$(perf_rows "$g" "$n")"
        read -r tr tb <<<"$(perf_rows "$t" "$n")"
        DATA="rows $gr+$tr/$want${n:+, $n iters}"
        if { [ "$gr" = $want ] || [ "$tr" = $want ]; } && [ "$gb" = 0 ] && [ "$tb" = 0 ] &&
            ! grep -qi 'completion with error\|couldn.t' "$g" "$t"; then
            DATA_OK=1
        fi
        if has -b "${gw[@]}"; then
            # -b: both sides run traffic and print every row, the sum of the
            # two sides' reports, which they exchange: the same figures.
            DATA="$DATA, -b"
            if [ "$gr" != $want ] || [ "$tr" != $want ] || ! grep -q 'Bidirectional BW Test' "$g" ||
                ! grep -q 'Bidirectional BW Test' "$t"; then
                DATA_OK=0 DATA="$DATA: not both sides' rows and Bidirectional headers"
            elif [ "$(perf_sums "$g")" != "$(perf_sums "$t")" ]; then
                DATA_OK=0 DATA="$DATA: the sides' sums differ"
            else
                DATA="$DATA, sums agree"
            fi
        fi
        if [[ $tool == ib_*_lat ]] && has -D "${gw[@]}"; then
            # A latency test's duration rows: perftest's own header
            # (t_avg, tps average) and 4 figures, on the side(s) with rows.
            DATA="$DATA, -D rows"
            local f
            for f in "$g" "$t"; do
                [ "$(perf_rows "$f" timed | cut -d' ' -f1)" = 0 ] && continue
                grep -q 't_avg\[usec\] *tps average' "$f" && [ "$(lat_dur_rows "$f")" = 0 ] ||
                    { DATA_OK=0 DATA="$DATA: not the duration header and rows in $(basename "$f")"; }
            done
        fi
        if [ "$tool" = ib_atomic_lat ] && [ "${tw[0]}" = exec ]; then
            DATA="$DATA, values: stock tool's own"
        elif [ "$tool" = ib_atomic_lat ]; then
            # tbrdma checks the atomics' values: as requester the values
            # fetched; as responder its target (perftest's CMP_AND_SWAP swaps
            # 0 for 0, so the target must still be 0).
            # With -D the responder has no count to check: it reports.
            if grep -q -e 'as expected' -e 'CMP_AND_SWAP left 0 in the target$' -e 'timed run of FETCH_AND_ADD left [1-9]' "$t"; then
                DATA="$DATA, values ok"
            else
                DATA_OK=0 DATA="$DATA, atomic values wrong or unchecked"
            fi
        fi
        ;;
    rping)
        local c size gg gbad gfirst tg tbad tfirst
        c=$(opt -C 0 "${gw[@]}") size=$(opt -S 64 "${gw[@]}")
        read -r gg gbad gfirst <<<"$(rping_lines "$size" "$g")"
        read -r tg tbad tfirst <<<"$(rping_lines "$size" "$t")"
        if [ "${tw[0]}" = ping ]; then
            # tbrdma ping compares each echo byte for byte itself.
            tg=$(sed -n 's/.* \([0-9]*\) received.*/\1/p' "$t")
            grep -q 'BAD ECHO' "$t" && tbad=1
        fi
        DATA="echo ok $gg+$tg/$c"
        [ "$gg" = "$c" ] && [ "$gbad" = 0 ] && [ "$tg" = "$c" ] && [ "$tbad" = 0 ] && DATA_OK=1
        [ "$gbad" = 0 ] && [ "$tbad" = 0 ] || DATA="$DATA; bad: ${gfirst:-$tfirst}"
        ;;
    ucx_perftest)
        # The client (the side that names the peer) prints the Final row;
        # both sides' UCX logs name the lane the data took.
        local n c lanes
        if [ "${SERVER[$i]}" = guest ]; then c=$t; n=$(opt -n "" "${tw[@]}"); else c=$g; n=$(opt -n "" "${gw[@]}"); fi
        lanes=$(cat "$g" "$t" | grep -cE 'ep_cfg\[[0-9]+\]: tag\((rc|ud)_verbs/')
        DATA="Final row, $n iters; lanes $lanes"
        grep -qE "^Final:[[:space:]]+$n[[:space:]]" "$c" && [ "$lanes" -ge 2 ] && DATA_OK=1
        ;;
    udaddy)
        DATA="transfers complete"
        grep -q 'data transfers complete' "$g" && DATA_OK=1
        ;;
    *)
        DATA="n/a ($tool)"
        DATA_OK=1
        ;;
    esac
}

verdict() {  # verdict RC: a tool's exit status in words
    case $1 in
    0) echo ok ;; none | '') echo "no exit" ;; 97) echo "not run" ;; 98) echo "not run" ;;
    124) echo "timeout" ;; 130) echo "SIGINT" ;; 137) echo "killed" ;; 143) echo "SIGTERM" ;;
    *) echo "exit $1" ;;
    esac
}

tbvm_log "checking the captures (icrccheck, tshark)"
t0=$SECONDS
# Two of tshark's guesses at what a payload carries misread perftest's: RPC
# over RDMA, and Ethernet over IB (eth_over_ib), which took a guest's 2-byte
# SEND payload 00 65 and its pad for an Ethernet type and reported a malformed
# frame (a false FAIL of lib-send-lat-tbserver, passed on its retry, CI of
# 2026-12-07). The payload is the tools' data, not a protocol.
TSHARK=(tshark -n -d udp.port==4791,infiniband --disable-protocol rpcordma --disable-heuristic eth_over_ib)
PASS=0 FAIL=0 TOT_SENT=0 TOT_RECV=0 TOT_BAD=0 TOT_MAL=0 TOT_RESENT=0 TOT_NAK=0 TOT_PRESENT=0
FAILED=()
TABLE=$OUT/table.txt
{
    printf '%-30s %-8s %-8s %-34s %-11s %-5s %-6s %-6s %s\n' PAIRING GUEST TBRDMA "DATA CHECK" "PKTS tb/rxe" ICRC TSHARK NAK/RS RESULT
    for i in "${!NAMES[@]}"; do
        name=${NAMES[$i]}
        grc=$(cat "$OUT/$name/guest.rc" 2>/dev/null || echo none)
        trc=$(cat "$OUT/$name/tbrdma.rc" 2>/dev/null || echo none)
        data_check "$name" "$i"
        pcap=$OUT/$name/capture.pcap icrc=FAIL tsh=FAIL sent=0 recv=0 bad=0 mal=0 resent=0 naks=0 present=0 frames=0 why=()
        if [ -s "$pcap" ]; then
            if mal_frames=$("${TSHARK[@]}" -r "$pcap" -Y _ws.malformed -T fields -e frame.number 2>"$OUT/$name/tshark.err"); then
                mal_frames=$(echo $mal_frames | tr ' ' ,)
                [ -z "$mal_frames" ] && tsh=ok
            else
                mal_frames=
                tsh=error
            fi
            "$OUT/icrccheck" -from "$HOST" ${mal_frames:+-malformed "$mal_frames"} "$pcap" >"$OUT/$name/check.txt" 2>&1 && icrc=ok
            read -r sent recv bad mal resent naks present frames <<<"$(sed -n 's/^summary .*sent=\([0-9]*\) received=\([0-9]*\) badicrc=\([0-9]*\) unparsable=[0-9]* malformed=\([0-9]*\) resent=\([0-9]*\) naks=\([0-9]*\) peerresent=\([0-9]*\) frames=\([0-9]*\).*/\1 \2 \3 \4 \5 \6 \7 \8/p' "$OUT/$name/check.txt")"
        fi
        : "${sent:=0}" "${recv:=0}" "${bad:=0}" "${mal:=0}" "${resent:=0}" "${naks:=0}" "${present:=0}" "${frames:=0}"
        dropped=$(cat "$OUT/$name/dropped" 2>/dev/null)
        captured=$(sed -n 's/^\([0-9]*\) packets captured.*/\1/p' "$pcap.log" 2>/dev/null)
        [ "$grc" = 0 ] || why+=("the guest tool: $(verdict "$grc")")
        [ "$trc" = 0 ] || why+=("tbrdma: $(verdict "$trc")")
        [ $DATA_OK = 1 ] || why+=("data check: $DATA")
        [ "$icrc" = ok ] || why+=("icrccheck failed (see $name/check.txt)")
        [ "$tsh" = ok ] || why+=("tshark: ${mal_frames:+malformed frames $mal_frames}${mal_frames:-could not decode (see $name/tshark.err)}")
        if receive_only "$i"; then
            [ "$recv" -gt 0 ] || why+=("no RoCEv2 packet from the guest in the capture")
        else
            [ "$sent" -gt 0 ] || why+=("no RoCEv2 packet from tbrdma in the capture")
        fi
        [ "${dropped:-0}" = 0 ] || why+=("the capture lost ${dropped:-?} packets (tcpdump)")
        [ "${captured:-x}" = "$frames" ] || why+=("the capture file holds $frames frames, tcpdump said it captured ${captured:-?}")
        # A tool that outlived its pairing (killed then, so that it cannot
        # spoil the next one) fails the pairing it belonged to.
        for side in guest host; do
            [ -s "$OUT/$name/$side.leftover" ] || continue
            while IFS= read -r l; do why+=("left running on the $side after the pairing (killed): $l"); done <"$OUT/$name/$side.leftover"
        done
        if [ ${#why[@]} = 0 ]; then res=PASS PASS=$((PASS + 1)); else res=FAIL FAIL=$((FAIL + 1)); FAILED+=("$i"); fi
        [ -s "$OUT/$name/tshark.err" ] || rm -f "$OUT/$name/tshark.err"
        printf '%s\n' "${why[@]}" >"$OUT/$name/why"
        [ ${#why[@]} = 0 ] && rm -f "$OUT/$name/why"
        TOT_SENT=$((TOT_SENT + sent)) TOT_RECV=$((TOT_RECV + recv)) TOT_BAD=$((TOT_BAD + bad)) TOT_MAL=$((TOT_MAL + mal))
        TOT_RESENT=$((TOT_RESENT + resent)) TOT_NAK=$((TOT_NAK + naks)) TOT_PRESENT=$((TOT_PRESENT + present))
        printf '%-30s %-8s %-8s %-34s %-11s %-5s %-6s %-6s %s\n' "$name" "$(verdict "$grc")" "$(verdict "$trc")" \
            "$([ $DATA_OK = 1 ] && echo "ok " || echo "FAIL ")$DATA" "$sent/$recv" "$icrc" "$tsh" "$naks/$resent" "$res"
    done
    for k in "${!SKIPPED[@]}"; do
        printf '%-30s %-8s %-8s %s\n' "${SKIPPED[$k]}" - - "SKIP on $TBVM_SUITE: ${SKIPWHY[$k]}"
    done
} >"$TABLE"
# Run-wide cross-check: rxe0 talked to nobody but tbrdma, so its packet
# counters must equal the captures' totals (every packet tbrdma sent was
# captured and reached rxe, and the other way round). The guest boots for
# this run only, so the counters cover exactly the pairings run. Checked when
# every pairing passed (a failure is explained per pairing above).
RXE_CHECK=
if [ -s "$OUT/rxe-counters.txt" ] && [ $FAIL = 0 ]; then
    rr=$(awk '$1 == "rcvd_pkts" {print $2}' "$OUT/rxe-counters.txt")
    rs=$(awk '$1 == "sent_pkts" {print $2}' "$OUT/rxe-counters.txt")
    if [ "${rr:-0}" = "$TOT_SENT" ] && [ "${rs:-0}" = "$TOT_RECV" ]; then
        RXE_CHECK="rxe0's counters agree with the captures: rcvd_pkts $rr, sent_pkts $rs"
    else
        RXE_CHECK="FAIL: rxe0's counters do not match the captures: rcvd_pkts ${rr:-?} (tbrdma sent $TOT_SENT), sent_pkts ${rs:-?} (captured from rxe: $TOT_RECV): packets were lost on the bridge or missed by the capture"
        FAIL=$((FAIL + 1))
    fi
fi
T_CHECK=$((SECONDS - t0))

{
    echo
    echo "== tbrdma interop with rdma_rxe ($TBVM_SUITE guest): $(date -u +%Y-%m-%dT%H:%M:%SZ), results in $OUT"
    echo "guest: $(grep -E '^(kernel|rdma-core|perftest)' "$OUT/versions.txt" 2>/dev/null | tr '\n' ' ')(qemu TCG, $TBVM_CPUS vCPU)"
    echo "tbrdma: $("$OUT/tbrdma" version 2>/dev/null | head -n 1); $(go version)"
    echo
    cat "$TABLE"
    echo
    echo "$PASS passed, $((${#NAMES[@]} - PASS)) failed of ${#NAMES[@]}${SKIPPED[0]:+ (${#SKIPPED[@]} more skipped on $TBVM_SUITE, reasons in the table)}; tbrdma sent $TOT_SENT RoCEv2 packets (bad ICRC $TOT_BAD, malformed $TOT_MAL, resent $TOT_RESENT), rxe sent $TOT_RECV (resent $TOT_PRESENT); NAKs $TOT_NAK"
    [ -z "$RXE_CHECK" ] || echo "$RXE_CHECK"
    echo "GUEST/TBRDMA: each tool's own verdict (exit status). DATA CHECK: see docs/interop.md. NAK/RS: NAKs either way / requests tbrdma sent again."
    for i in "${FAILED[@]}"; do
        name=${NAMES[$i]}
        echo
        echo "FAIL $name"
        sed 's/^/  because: /' "$OUT/$name/why"
        echo "  first packet that differed: $(sed -n 's/^first problem: //p' "$OUT/$name/check.txt" 2>/dev/null || true)"
        sed -n 's/^  then: /  then: /p' "$OUT/$name/check.txt" 2>/dev/null
        sed -n 's/^last packet /  last packet /p' "$OUT/$name/check.txt" 2>/dev/null
        echo "  guest:  $(cat "$OUT/$name/guest.cmd" 2>/dev/null) -> $(verdict "$(cat "$OUT/$name/guest.rc" 2>/dev/null)")"
        tail -n 4 "$OUT/$name/guest.out" 2>/dev/null | sed 's/^/    | /'
        echo "  tbrdma: $(cat "$OUT/$name/tbrdma.cmd") -> $(verdict "$(cat "$OUT/$name/tbrdma.rc" 2>/dev/null)")"
        tail -n 4 "$OUT/$name/tbrdma.out" 2>/dev/null | sed 's/^/    | /'
        if [ -s "$OUT/$name/guest.diag" ]; then
            echo "  guest after the pairing ($name/guest.diag): $(sed -n '/^== rdma res show qp/,/^==/p' "$OUT/$name/guest.diag" | grep -vc '^==') QP(s) left; kernel's last lines:"
            sed -n '/^== dmesg/,$p' "$OUT/$name/guest.diag" | sed 1d | tail -n 3 | sed 's/^/    | /'
        fi
        echo "  files: $OUT/$name/{capture.pcap,check.txt,guest.out,tbrdma.out}; guest console: $RUN/console.log"
    done
    echo
    echo "time: $((SECONDS - T_START)) s in all (image $T_IMAGE s, guest boot + pairings $T_GUEST s, checks $T_CHECK s)"
} | tee "$OUT/summary.txt"

if [ $PRUNE = 1 ]; then
    for i in "${!NAMES[@]}"; do
        [ -e "$OUT/${NAMES[$i]}/why" ] || rm -f "$OUT/${NAMES[$i]}/capture.pcap"
    done
fi
[ $FAIL = 0 ] && [ $PASS -gt 0 ]
