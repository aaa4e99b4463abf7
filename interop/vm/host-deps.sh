#!/bin/bash
# Install the host packages the interop harness needs, only those missing
# (Debian/Ubuntu, apt). Prints what it found; fails loudly when a program is
# missing and cannot be installed (not root, no apt-get, mirror unreachable).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$HERE/config.sh"

# program -> Debian package
declare -A PKG=(
    [qemu-system-x86_64]=qemu-system-x86 [debootstrap]=debootstrap [mkfs.ext4]=e2fsprogs
    [cpio]=cpio [gzip]=gzip [tcpdump]=tcpdump [tshark]=tshark [ip]=iproute2 [ss]=iproute2
    [pgrep]=procps [flock]=util-linux [timeout]=coreutils [sha256sum]=coreutils [awk]=mawk
    [ib_write_bw]=perftest [ibv_rc_pingpong]=ibverbs-utils [rping]=rdmacm-utils [gcc]=gcc
)
# The last line: the pairings that run the stock tools over tbrdma's C
# library on the host (the lib-* lines of interop/matrix.txt) need the tools
# and, to build the library with cabi/build.sh, gcc and the headers below.
missing=()
for prog in "${!PKG[@]}"; do
    command -v "$prog" >/dev/null 2>&1 || missing+=("${PKG[$prog]}")
done
for dev in libibverbs-dev librdmacm-dev; do
    [[ "$(dpkg-query -W -f='${db:Status-Abbrev}' "$dev" 2>/dev/null || true)" == ii* ]] || missing+=("$dev")
done
if [ ${#missing[@]} = 0 ]; then
    tbvm_log "host packages: all present ($(qemu-system-x86_64 --version | head -n 1), $(tshark --version 2>/dev/null | head -n 1 | cut -d' ' -f1-3))"
    exit 0
fi
mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
command -v apt-get >/dev/null || tbvm_die "missing packages ${missing[*]} and no apt-get to install them: install them by hand"
tbvm_need_root "installing ${missing[*]}"
tbvm_log "installing ${missing[*]} with apt-get"
apt-get update -q || tbvm_die "apt-get update failed: is the Debian mirror reachable? (needed to install ${missing[*]})"
DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" ||
    tbvm_die "apt-get install ${missing[*]} failed (see above)"
