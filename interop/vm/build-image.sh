#!/bin/bash
# Build (or reuse) the interop guest of $TBVM_SUITE (bookworm, the default, or
# trixie) in $TBVM_CACHE (default /var/tmp/tbrdma-vm, /var/tmp/tbrdma-vm-trixie):
#   rootfs/        Debian $TBVM_SUITE, debootstrap minbase + $TBVM_PACKAGES
#   vmlinuz        the Debian kernel (rdma_rxe is one of its modules)
#   initrd.gz      busybox + the modules needed to mount the virtio disk
#   disk.ext4      the root file system image (qemu opens it with snapshot=on,
#                  so it is never modified by a run)
#   versions.txt   kernel and RDMA package versions in the guest
#
# Two stages, each skipped when its inputs did not change:
#   1. rootfs: key = hash(suite, mirror, packages, this script's recipe
#      version). Minutes (debootstrap); done once per machine.
#   2. image:  key = hash(stage-1 key, guest/tbvm-init, guest/initrd-init,
#      this script, the addresses in /etc/hosts). Seconds.
# The keys are stored next to the outputs (rootfs.key, image.key).
#
# Usage: build-image.sh [--force]   (--force: redo both stages)
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$HERE/config.sh"
tbvm_need_root "building the guest image"

FORCE=0
[ "${1:-}" = --force ] && FORCE=1

for t in debootstrap mkfs.ext4 cpio gzip sha256sum flock; do
    command -v $t >/dev/null || tbvm_die "$t is missing: run interop/vm/host-deps.sh (installs debootstrap, e2fsprogs, cpio, ...)"
done

# Bump when the rootfs recipe below changes in a way the key does not see.
ROOTFS_RECIPE=1
ROOTFS=$TBVM_CACHE/rootfs
mkdir -p "$TBVM_CACHE"
exec 9>"$TBVM_CACHE/.build.lock"
flock 9   # a second build waits for the first, then finds the cache ready

rootfs_key=$(printf '%s\n' "recipe=$ROOTFS_RECIPE" "suite=$TBVM_SUITE" "mirror=$TBVM_MIRROR" "packages=$TBVM_PACKAGES" | sha256sum | cut -c1-16)
# guest/job-lib.sh is not part of the image (each run copies it to /job).
image_key=$( { echo "$rootfs_key $TBVM_HOST_IP $TBVM_GUEST_IP"; cat "$HERE/build-image.sh" "$HERE/guest/tbvm-init" "$HERE/guest/initrd-init"; } |
    sha256sum | cut -c1-16)

if [ $FORCE = 0 ] && [ "$(cat "$TBVM_CACHE/image.key" 2>/dev/null)" = "$image_key" ] &&
    [ -s "$TBVM_CACHE/disk.ext4" ] && [ -s "$TBVM_CACHE/vmlinuz" ] && [ -s "$TBVM_CACHE/initrd.gz" ]; then
    tbvm_log "guest image up to date in $TBVM_CACHE (key $image_key)"
    exit 0
fi

t0=$SECONDS
# ------------------------------------------------------------ stage 1: rootfs
if [ $FORCE = 1 ] || [ "$(cat "$TBVM_CACHE/rootfs.key" 2>/dev/null)" != "$rootfs_key" ] || [ ! -d "$ROOTFS" ]; then
    tbvm_log "stage 1: debootstrap $TBVM_SUITE from $TBVM_MIRROR into $ROOTFS (several minutes; log: $TBVM_CACHE/debootstrap.log)"
    rm -f "$TBVM_CACHE/rootfs.key" "$TBVM_CACHE/image.key"
    rm -rf --one-file-system "$ROOTFS"
    if ! debootstrap --variant=minbase --include="$TBVM_PACKAGES" "$TBVM_SUITE" "$ROOTFS" "$TBVM_MIRROR" \
        >"$TBVM_CACHE/debootstrap.log" 2>&1; then
        tail -n 25 "$TBVM_CACHE/debootstrap.log" >&2
        tbvm_die "debootstrap failed (full log: $TBVM_CACHE/debootstrap.log). Check that $TBVM_MIRROR is reachable, or set TBVM_MIRROR to a Debian mirror that is."
    fi
    chroot "$ROOTFS" apt-get clean
    kver=$(ls "$ROOTFS/lib/modules" | sort -V | tail -n 1)
    [ -n "$kver" ] || tbvm_die "the rootfs has no kernel modules: debootstrap did not install linux-image-amd64 (see $TBVM_CACHE/debootstrap.log)"
    # Drop what a headless RoCE guest never loads: smaller image, faster mkfs.
    mods=$ROOTFS/lib/modules/$kver/kernel
    rm -rf "$mods/sound" "$mods/drivers/gpu" "$mods/drivers/media" "$mods/drivers/net/wireless" \
        "$mods/drivers/bluetooth" "$mods/net/bluetooth" "$mods/net/wireless" "$mods/net/mac80211" \
        "$mods/drivers/usb" "$mods/drivers/staging" "$mods/drivers/infiniband/hw" "$mods/drivers/iio" \
        "$ROOTFS/usr/share/doc" "$ROOTFS/usr/share/man" "$ROOTFS/usr/share/locale" \
        "$ROOTFS/var/lib/apt/lists"/*_Packages "$ROOTFS"/boot/initrd.img-*
    chroot "$ROOTFS" depmod -a "$kver"
    echo "$rootfs_key" >"$TBVM_CACHE/rootfs.key"
    tbvm_log "stage 1 done in $((SECONDS - t0)) s"
else
    tbvm_log "stage 1: rootfs up to date (key $rootfs_key)"
fi
t1=$SECONDS

# ------------------------------------------------------------- stage 2: image
kver=$(ls "$ROOTFS/lib/modules" | sort -V | tail -n 1)
install -m 0755 "$HERE/guest/tbvm-init" "$ROOTFS/sbin/tbvm-init"
echo rxe-guest >"$ROOTFS/etc/hostname"
printf '127.0.0.1 localhost\n%s tbrdma-host\n%s rxe-guest\n' "$TBVM_HOST_IP" "$TBVM_GUEST_IP" >"$ROOTFS/etc/hosts"
printf '/dev/vda / ext4 rw,noatime 0 1\n' >"$ROOTFS/etc/fstab"
mkdir -p "$ROOTFS/job"
{
    echo "suite $TBVM_SUITE from $TBVM_MIRROR"
    echo "kernel $kver"
    # shellcheck disable=SC2086 # a list of package names
    chroot "$ROOTFS" dpkg-query -W -f '${Package} ${Version}\n' "linux-image-$kver" $TBVM_VERSION_PACKAGES 2>/dev/null || true
} >"$TBVM_CACHE/versions.txt"
cp "$ROOTFS/boot/vmlinuz-$kver" "$TBVM_CACHE/vmlinuz.new"

# initrd: busybox and virtio_pci, virtio_blk, ext4 with their dependencies,
# in the order modprobe would load them.
ird=$(mktemp -d)
trap 'rm -rf "$ird"' EXIT
mkdir -p "$ird"/{bin,dev,proc,sys,root,modules}
cp "$ROOTFS/bin/busybox" "$ird/bin/busybox"
for m in virtio_pci virtio_blk ext4; do
    chroot "$ROOTFS" modprobe --show-depends --set-version "$kver" "$m"
done | awk '$1 == "insmod" && !seen[$2]++ {print $2}' | while read -r ko; do
    cp "$ROOTFS$ko" "$ird/modules/"
    basename "$ko" >>"$ird/modules/load"
done
[ -s "$ird/modules/load" ] || tbvm_die "found no modules for the initrd in $ROOTFS (kernel $kver)"
install -m 0755 "$HERE/guest/initrd-init" "$ird/init"
(cd "$ird" && find . | cpio -o -H newc --quiet | gzip -6) >"$TBVM_CACHE/initrd.gz.new"

size_mb=$(($(du -sm --exclude=./boot "$ROOTFS" | cut -f1) * 5 / 4 + 200))
rm -f "$TBVM_CACHE/disk.ext4.new"
truncate -s "${size_mb}M" "$TBVM_CACHE/disk.ext4.new"
mkfs.ext4 -q -F -L tbvm-root -d "$ROOTFS" "$TBVM_CACHE/disk.ext4.new"
for f in vmlinuz initrd.gz disk.ext4; do mv -f "$TBVM_CACHE/$f.new" "$TBVM_CACHE/$f"; done
echo "$image_key" >"$TBVM_CACHE/image.key"
t2=$SECONDS
echo "rootfs $((t1 - t0)) s, image $((t2 - t1)) s, total $((t2 - t0)) s ($(date -u +%FT%TZ))" >>"$TBVM_CACHE/build-times.txt"
tbvm_log "guest image ready in $TBVM_CACHE: kernel $kver, disk ${size_mb} MiB; took $((t1 - t0)) s (rootfs) + $((t2 - t1)) s (image)"
