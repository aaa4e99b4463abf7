# Functions of the interop harness: network namespace, guest boot, capture.
# Sourced by interop/run.sh and the scripts in this directory (needs bash).
# The guest image comes from build-image.sh; settings from config.sh.
TBVM_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$TBVM_DIR/config.sh"

TBVM_QEMU_PID=
tbvm_ns() { ip netns exec "$TBVM_NETNS" "$@"; }

# tbvm_net_up: the namespace $TBVM_NETNS with bridge $TBVM_BRIDGE
# ($TBVM_HOST_IP) and the guest's tap on it. No default route, IPv6 off:
# nothing leaves the namespace and the captured wire stays quiet. Idempotent.
tbvm_net_up() {
    [ -e /dev/net/tun ] || tbvm_die "/dev/net/tun is missing: the guest's tap needs it (modprobe tun, or give the container --device /dev/net/tun)"
    ip netns list | grep -qw "^$TBVM_NETNS" || ip netns add "$TBVM_NETNS" ||
        tbvm_die "cannot create network namespace $TBVM_NETNS (needs root and CAP_SYS_ADMIN)"
    local n="ip -n $TBVM_NETNS"
    $n link set lo up
    tbvm_ns sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1 || true
    $n link show "$TBVM_BRIDGE" >/dev/null 2>&1 ||
        $n link add "$TBVM_BRIDGE" type bridge stp_state 0 forward_delay 0 mcast_snooping 0
    $n link show "$TBVM_TAP" >/dev/null 2>&1 || $n tuntap add dev "$TBVM_TAP" mode tap ||
        tbvm_die "cannot create tap $TBVM_TAP in $TBVM_NETNS (is the tun driver available?)"
    $n link set "$TBVM_TAP" mtu "$TBVM_MTU" master "$TBVM_BRIDGE" up
    $n link set "$TBVM_BRIDGE" mtu "$TBVM_MTU" up
    $n addr replace "$TBVM_HOST_IP/$TBVM_PREFIX" dev "$TBVM_BRIDGE"
}

# tbvm_net_down: delete the namespace (and with it bridge and tap).
tbvm_net_down() {
    ip netns list | grep -qw "^$TBVM_NETNS" || return 0
    local p
    for p in $(ip netns pids "$TBVM_NETNS" 2>/dev/null); do
        echo "interop: warning: process $p ($(tr '\0' ' ' </proc/$p/cmdline 2>/dev/null)) is still in $TBVM_NETNS" >&2
    done
    ip netns del "$TBVM_NETNS"
}

# tbvm_image_check: the files build-image.sh makes must exist.
tbvm_image_check() {
    local f
    for f in vmlinuz initrd.gz disk.ext4; do
        [ -s "$TBVM_CACHE/$f" ] || tbvm_die "$TBVM_CACHE/$f is missing: run interop/vm/build-image.sh"
    done
}

# tbvm_wait_qemu_free SECONDS: only one qemu guest may run on this machine at
# a time (2 cores, TCG). Waits while another one (not ours) runs.
tbvm_wait_qemu_free() {
    local limit=${1:-1200} waited=0 others
    while others=$(pgrep -f qemu-system | tr '\n' ' ') && [ -n "$others" ]; do
        if [ $waited = 0 ]; then
            tbvm_log "another qemu guest is running (pid $others); waiting for it to end (up to $limit s)"
        fi
        [ $waited -ge "$limit" ] && tbvm_die "a qemu guest (pid $others) has been running for more than $limit s; the harness runs one guest at a time. Wait for it to end, or raise TBVM_QEMU_WAIT."
        sleep 5
        waited=$((waited + 5))
    done
}

# tbvm_boot RUNDIR JOB_TIMEOUT: boot the guest in the background with RUNDIR
# as its /job (RUNDIR/job.sh must exist). Sets TBVM_QEMU_PID. The console goes
# to RUNDIR/console.log, qemu's own messages to RUNDIR/qemu.log.
tbvm_boot() {
    local run=$1 jt=$2
    [ -f "$run/job.sh" ] || tbvm_die "tbvm_boot: $run/job.sh is missing"
    tbvm_image_check
    cp "$TBVM_DIR/guest/job-lib.sh" "$run/lib.sh"
    mkdir -p "$run/flags"
    rm -f "$run/job.rc" "$run/job.out"
    tbvm_wait_qemu_free "${TBVM_QEMU_WAIT:-1200}"
    # Not through tbvm_ns: a function run with & is a subshell, and $! must be
    # qemu's own pid ("ip netns exec" execs the program).
    ip netns exec "$TBVM_NETNS" qemu-system-x86_64 -name tbrdma-interop-guest \
        -machine pc -accel tcg -cpu max -m "$TBVM_MEM" -smp "$TBVM_CPUS" \
        -nodefaults -no-user-config -display none -monitor none -no-reboot \
        -serial "file:$run/console.log" \
        -kernel "$TBVM_CACHE/vmlinuz" -initrd "$TBVM_CACHE/initrd.gz" \
        -append "console=ttyS0 quiet panic=-1 root=/dev/vda init=/sbin/tbvm-init tbvm.ip=$TBVM_GUEST_IP/$TBVM_PREFIX tbvm.mtu=$TBVM_MTU tbvm.timeout=$jt" \
        -drive "file=$TBVM_CACHE/disk.ext4,if=virtio,format=raw,snapshot=on" \
        -netdev "tap,id=net0,ifname=$TBVM_TAP,script=no,downscript=no" \
        -device "virtio-net-pci,netdev=net0,mac=$TBVM_GUEST_MAC" \
        -fsdev "local,id=job,path=$run,security_model=none" \
        -device virtio-9p-pci,fsdev=job,mount_tag=job \
        -device virtio-rng-pci \
        >"$run/qemu.log" 2>&1 &
    TBVM_QEMU_PID=$!
    echo "$TBVM_QEMU_PID" >"$run/qemu.pid"
}

# tbvm_wait_guest SECONDS: wait for our guest to power off; after SECONDS,
# kill it (only the qemu this shell started). Returns 1 if it had to be killed.
tbvm_wait_guest() {
    local limit=$1 t=0
    [ -n "$TBVM_QEMU_PID" ] || return 0
    while kill -0 "$TBVM_QEMU_PID" 2>/dev/null; do
        if [ $t -ge $((limit * 2)) ]; then
            tbvm_log "the guest did not power off within $limit s: stopping qemu (pid $TBVM_QEMU_PID)"
            kill "$TBVM_QEMU_PID" 2>/dev/null
            wait "$TBVM_QEMU_PID" 2>/dev/null
            TBVM_QEMU_PID=
            return 1
        fi
        sleep 0.5
        t=$((t + 1))
    done
    wait "$TBVM_QEMU_PID" 2>/dev/null
    TBVM_QEMU_PID=
    return 0
}

# tbvm_stop_guest: kill our guest now (cleanup paths).
tbvm_stop_guest() {
    [ -n "$TBVM_QEMU_PID" ] || return 0
    kill "$TBVM_QEMU_PID" 2>/dev/null
    wait "$TBVM_QEMU_PID" 2>/dev/null
    TBVM_QEMU_PID=
}

# tbvm_wait_file PATH SECONDS
tbvm_wait_file() {
    local n=0
    while [ ! -e "$1" ]; do
        [ $n -ge $(($2 * 5)) ] && return 1
        sleep 0.2
        n=$((n + 1))
    done
}

# tbvm_capture_start PCAP: tcpdump on the bridge (RoCEv2 and TCP side
# channels), whole packets. Immediate mode, so that every packet is in the
# file when tcpdump is stopped (without it, libpcap holds packets in a ring
# block for up to a second, and a short test's packets can miss the file);
# a 128 MiB kernel buffer and a higher priority than the guest, so that the
# kernel does not drop packets when the 2 cores are busy (it did with 32 MiB
# under load). The file is written through stdio (no -U): fewer writes;
# tcpdump flushes it when it stops. Sets TBVM_TCPDUMP_PID.
tbvm_capture_start() {
    ip netns exec "$TBVM_NETNS" nice -n -5 tcpdump -i "$TBVM_BRIDGE" -Z root -s 0 --immediate-mode -B 131072 -n -w "$1" \
        'udp port 4791 or tcp' >"$1.log" 2>&1 &
    TBVM_TCPDUMP_PID=$!
    local n=0
    until grep -q listening "$1.log" 2>/dev/null; do
        [ $n -ge 100 ] && tbvm_die "tcpdump did not start (see $1.log)"
        sleep 0.1
        n=$((n + 1))
    done
}

# tbvm_capture_stop PCAP: stop tcpdump and print how many packets the kernel
# dropped (tcpdump's own count; 0 means the capture is complete). SIGTERM,
# as a background job of a script starts with SIGINT ignored.
tbvm_capture_stop() {
    [ -n "${TBVM_TCPDUMP_PID:-}" ] || return 0
    sleep 0.5   # the last ACKs and side-channel packets
    kill -TERM "$TBVM_TCPDUMP_PID" 2>/dev/null
    wait "$TBVM_TCPDUMP_PID" 2>/dev/null
    TBVM_TCPDUMP_PID=
    sed -n 's/^\([0-9]*\) packets dropped by kernel.*/\1/p' "$1.log"
}
