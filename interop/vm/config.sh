# Settings of the project's interop harness (interop/vm). Sourced by the other
# scripts in this directory and by interop/run.sh; every value can be
# overridden from the environment.

# The Debian release of the guest. Each suite has its own defaults below
# (cache, namespace, bridge, tap, addresses), so a bookworm and a trixie
# guest never share state, files or names, even if both ran at once.
#   bookworm  Debian 12: kernel 6.1 rdma_rxe, rdma-core 44, perftest 4.5
#   trixie    Debian 13: kernel 6.12 rdma_rxe, rdma-core 56.1, perftest 25.01
TBVM_SUITE=${TBVM_SUITE:-bookworm}
case $TBVM_SUITE in
bookworm)
    _tbvm_cache=/var/tmp/tbrdma-vm _tbvm_out=/var/tmp/tbrdma-interop
    _tbvm_netns=tbinterop _tbvm_bridge=tbbr0 _tbvm_tap=tbtap0 _tbvm_net=198.18.0 _tbvm_mac=52:54:00:18:00:02
    _tbvm_rdmacm=librdmacm1
    ;;
trixie)
    _tbvm_cache=/var/tmp/tbrdma-vm-trixie _tbvm_out=/var/tmp/tbrdma-interop-trixie
    _tbvm_netns=tbinterop13 _tbvm_bridge=tbbr13 _tbvm_tap=tbtap13 _tbvm_net=198.18.13 _tbvm_mac=52:54:00:18:13:02
    # The 64-bit time_t transition renamed the library package.
    _tbvm_rdmacm=librdmacm1t64
    ;;
*)
    echo "interop: ERROR: TBVM_SUITE=$TBVM_SUITE is not a suite the harness knows: use bookworm (Debian 12) or trixie (Debian 13)" >&2
    exit 1
    ;;
esac

# Where the guest image and run directories live (large; never in git).
TBVM_CACHE=${TBVM_CACHE:-$_tbvm_cache}
# Where interop/run.sh puts its results by default (one directory per run).
TBVM_OUT_BASE=${TBVM_OUT_BASE:-$_tbvm_out}
# Packages the guest gets on top of debootstrap's minbase variant (the same
# names in both suites; the libraries come as their dependencies).
TBVM_PACKAGES=${TBVM_PACKAGES:-linux-image-amd64,kmod,busybox-static,iproute2,procps,rdma-core,ibverbs-providers,ibverbs-utils,rdmacm-utils,perftest,infiniband-diags,ucx-utils,libfabric-bin}
# The packages whose versions a run records (versions.txt); the library
# names differ between suites.
TBVM_VERSION_PACKAGES=${TBVM_VERSION_PACKAGES:-rdma-core libibverbs1 ibverbs-providers ibverbs-utils $_tbvm_rdmacm rdmacm-utils perftest ucx-utils libfabric-bin}

# The host side lives in its own network namespace; only one /24 of the
# 198.18.0.0/15 benchmarking range is used in it (198.18.0.0/24 for
# bookworm, 198.18.13.0/24 for trixie).
TBVM_NETNS=${TBVM_NETNS:-$_tbvm_netns}
TBVM_BRIDGE=${TBVM_BRIDGE:-$_tbvm_bridge}
TBVM_TAP=${TBVM_TAP:-$_tbvm_tap}
TBVM_HOST_IP=${TBVM_HOST_IP:-$_tbvm_net.1}
TBVM_GUEST_IP=${TBVM_GUEST_IP:-$_tbvm_net.2}
TBVM_PREFIX=${TBVM_PREFIX:-24}
TBVM_GUEST_MAC=${TBVM_GUEST_MAC:-$_tbvm_mac}
unset _tbvm_cache _tbvm_out _tbvm_netns _tbvm_bridge _tbvm_tap _tbvm_net _tbvm_mac _tbvm_rdmacm
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
