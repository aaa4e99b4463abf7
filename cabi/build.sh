#!/usr/bin/env bash
# Builds tbrdma's C library: one file, libibverbs.so.1, and librdmacm.so.1
# beside it as a symbolic link to it (one Go runtime per process), plus the
# tbrdma binary that `tbrdma exec` runs programs with.
#
#   cabi/build.sh [OUTDIR]      (default: build/ at the top of the checkout)
#
# Needs a C compiler and the rdma-core headers (Debian: gcc libibverbs-dev
# librdmacm-dev).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=${1:-build}
mkdir -p "$out/lib"
out=$(cd "$out" && pwd)

missing=()
command -v "${CC:-cc}" >/dev/null || missing+=(gcc)
for h in infiniband/verbs.h rdma/rdma_cma.h; do
	if ! echo "#include <$h>" | "${CC:-cc}" -E -x c - >/dev/null 2>&1; then
		case $h in
		infiniband/*) missing+=(libibverbs-dev) ;;
		rdma/*) missing+=(librdmacm-dev) ;;
		esac
	fi
done
if ((${#missing[@]})); then
	echo "cabi/build.sh: missing ${missing[*]}; on Debian or Ubuntu: sudo apt-get install ${missing[*]}" >&2
	exit 1
fi

map=$(pwd)/cabi/libtbrdma.map
CGO_ENABLED=1 go build -tags tbrdma_cabi -buildmode=c-shared -trimpath \
	-ldflags "-extldflags '-Wl,--version-script=$map -Wl,-soname,libibverbs.so.1'" \
	-o "$out/lib/libibverbs.so.1" ./cabi
rm -f "$out/lib/libibverbs.so.1.h" "$out/lib/libibverbs.so.h"
ln -sf libibverbs.so.1 "$out/lib/librdmacm.so.1"
go build -o "$out/tbrdma" ./cmd/tbrdma
echo "built $out/lib/libibverbs.so.1 (and librdmacm.so.1 -> it), $out/tbrdma"
