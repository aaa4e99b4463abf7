# Helpers for job scripts in the interop guest. The harness copies this file
# to the run directory, the guest's /job; a job starts with  . /job/lib.sh
# Flags are empty files in /job/flags: the 9p share is mounted with
# cache=none, so the host sees them at once and the other way round.
FLAGS=/job/flags
DEV=rxe0
# tbrdma's address: build-image.sh writes it into /etc/hosts as tbrdma-host
# (198.18.0.1 in the bookworm guest, 198.18.13.1 in the trixie one).
HOST=${HOST:-$(awk '$2 == "tbrdma-host" {print $1; exit}' /etc/hosts)}
GUEST=$(ip -4 -o addr show dev eth0 | awk '{sub("/.*", "", $4); print $4; exit}')

uptime_s() { cut -d' ' -f1 /proc/uptime; }
say() { echo "[$(uptime_s)] $*"; }

# gid_index: the index of rxe0's RoCEv2 GID for our IPv4 address
# (::ffff:a.b.c.d), waiting up to 30 s for rxe to add it.
gid_index() {
    want=$(echo "$GUEST" | awk -F. '{printf "0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x", $1, $2, $3, $4}')
    n=0
    while [ $n -lt 60 ]; do
        for f in /sys/class/infiniband/$DEV/ports/1/gids/*; do
            if [ "$(cat "$f" 2>/dev/null)" = "$want" ]; then basename "$f"; return 0; fi
        done
        sleep 0.5
        n=$((n + 1))
    done
    say "no GID for $GUEST on $DEV" >&2
    return 1
}

flag() { : >"$FLAGS/$1"; }
# wait_flag NAME SECONDS
wait_flag() {
    n=0
    while [ ! -e "$FLAGS/$1" ]; do
        [ $n -ge $(($2 * 5)) ] && { say "no flag $1 after $2 s"; return 1; }
        sleep 0.2
        n=$((n + 1))
    done
}

# wait_ready SPEC [PID]: until a server in this guest listens. SPEC is
# tcp:PORT (a TCP listener: the perftest and pingpong side channel) or
# cm:PORT (an rdma_cm listener). Never probes with a connection: perftest
# would take it for its client. Gives up after 60 s, or when process PID
# (the server) has ended.
wait_ready() {
    n=0
    while [ $n -lt 300 ]; do
        if [ -n "${2:-}" ] && ! kill -0 "$2" 2>/dev/null; then
            say "the server ended before it listened ($1)"
            return 1
        fi
        case $1 in
        tcp:*) ss -Hltn "sport = :${1#tcp:}" | grep -q . && return 0 ;;
        cm:*) rdma res show cm_id 2>/dev/null | grep LISTEN | grep -q ":${1#cm:}\b" && return 0 ;;
        *) say "unknown readiness spec $1"; return 1 ;;
        esac
        sleep 0.2
        n=$((n + 1))
    done
    say "nothing listening ($1) after 60 s"
    return 1
}

# reap_session SID: the processes still in session SID (a pairing's tool,
# started with setsid), one line each, then SIGKILL for all of them, so
# that a tool that outlived its pairing cannot hold a port or a QP for the
# next one. Prints nothing when the session is empty.
reap_session() {
    left=$(ps -o pid=,stat=,etimes=,wchan:24=,args= -s "$1" 2>/dev/null)
    [ -n "$left" ] || return 0
    echo "$left"
    pkill -KILL -s "$1" 2>/dev/null
    n=0
    while pgrep -s "$1" >/dev/null 2>&1 && [ $n -lt 50 ]; do sleep 0.2; n=$((n + 1)); done
    pgrep -s "$1" >/dev/null 2>&1 && echo "still there 10 s after SIGKILL"
    return 0
}

# guest_diag: the guest's state after a failed pairing: its user processes
# (with the kernel function a blocked one waits in), rxe's QPs and CM IDs,
# TCP sockets and the kernel's last messages.
guest_diag() {
    echo "== processes"
    ps -eo pid,ppid,stat,etimes,wchan:24,args | awk 'NR == 1 || $NF !~ /^\[/'
    echo "== rdma res show qp"
    rdma res show qp
    echo "== rdma res show cm_id"
    rdma res show cm_id
    echo "== ss -tanp"
    ss -tanp
    echo "== dmesg (last 30 lines)"
    dmesg | tail -n 30
}
