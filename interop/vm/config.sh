# Settings of the project's interop harness (interop/vm). Sourced by the other
# scripts in this directory and by interop/run.sh; every value can be
# overridden from the environment.

# Where the guest image and run directories live (large; never in git).
TBVM_CACHE=${TBVM_CACHE:-/var/tmp/tbrdma-vm}
TBVM_SUITE=${TBVM_SUITE:-bookworm}
# Packages the guest gets on top of debootstrap's minbase variant.
TBVM_PACKAGES=${TBVM_PACKAGES:-linux-image-amd64,kmod,busybox-static,iproute2,procps,rdma-core,ibverbs-providers,ibverbs-utils,rdmacm-utils,perftest,infiniband-diags,ucx-utils,libfabric-bin}

# The host side lives in its own network namespace; only 198.18.0.0/24
# (part of the 198.18.0.0/15 benchmarking range) is used in it.
TBVM_NETNS=${TBVM_NETNS:-tbinterop}
TBVM_BRIDGE=${TBVM_BRIDGE:-tbbr0}
TBVM_TAP=${TBVM_TAP:-tbtap0}
TBVM_HOST_IP=${TBVM_HOST_IP:-198.18.0.1}
TBVM_GUEST_IP=${TBVM_GUEST_IP:-198.18.0.2}
TBVM_PREFIX=${TBVM_PREFIX:-24}
TBVM_GUEST_MAC=${TBVM_GUEST_MAC:-52:54:00:18:00:02}
# Link MTU of bridge, tap and guest eth0. rxe derives its IB path MTU from
# the netdev MTU, so 4500 gives rxe0 an active MTU of 4096.
TBVM_MTU=${TBVM_MTU:-4500}

# The guest machine: pure software emulation (TCG), no KVM needed.
TBVM_MEM=${TBVM_MEM:-768}
TBVM_CPUS=${TBVM_CPUS:-1}

tbvm_log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
tbvm_die() { printf 'interop: ERROR: %s\n' "$*" >&2; exit 1; }
tbvm_need_root() {
    [ "$(id -u)" = 0 ] || tbvm_die "$1 needs root (network namespaces, tap devices, debootstrap, tcpdump). Run it with sudo, or as root in CI."
}

# The Debian archive this machine's apt is configured with, so the guest
# comes from the same mirror (deb822 .sources files first, then sources.list).
tbvm_mirror() {
    local m
    m=$({ cat /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '$1 == "URIs:" {for (i = 2; i <= NF; i++) print $i}'
          grep -h '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | awk '{for (i = 2; i <= NF; i++) if ($i ~ /^https?:/) {print $i; break}}'; } |
        grep -v -e security -e updates | grep -m1 debian || true)
    echo "${m:-http://deb.debian.org/debian}"
}
TBVM_MIRROR=${TBVM_MIRROR:-$(tbvm_mirror)}
