#!/bin/bash
# Boot the interop guest once with a job of your own, for exploring and
# debugging: the job (a file, or a shell command line) runs as /job/job.sh in
# the guest with /job/lib.sh available (gid_index, flag, wait_flag,
# wait_ready); the bridge is captured to DIR/capture.pcap. The namespace
# stays up while the guest runs, so tbrdma can be run against it from
# another shell:  ip netns exec tbinterop tbrdma ...  (tbinterop13 for the
# trixie guest: TBVM_SUITE=trixie interop/vm/run-job.sh ...)
#
# Usage (as root): interop/vm/run-job.sh [-o DIR] [-t SECONDS] JOB
#   e.g. interop/vm/run-job.sh 'ibv_devinfo -v; rdma link; ip addr'
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$HERE/lib.sh"
DIR= LIMIT=600
while getopts o:t: opt; do
    case $opt in o) DIR=$OPTARG ;; t) LIMIT=$OPTARG ;; *) exit 2 ;; esac
done
shift $((OPTIND - 1))
[ $# = 1 ] || { echo "usage: $0 [-o DIR] [-t SECONDS] JOB" >&2; exit 2; }
tbvm_need_root "interop/vm/run-job.sh"
DIR=${DIR:-$TBVM_CACHE/runs/job-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
if [ -f "$1" ]; then cp "$1" "$DIR/job.sh"; else printf '%s\n' "$1" >"$DIR/job.sh"; fi
trap 'tbvm_stop_guest; [ -n "${TBVM_TCPDUMP_PID:-}" ] && kill -TERM "$TBVM_TCPDUMP_PID"; tbvm_net_down' EXIT
tbvm_net_up
tbvm_capture_start "$DIR/capture.pcap"
tbvm_boot "$DIR" "$LIMIT"
tbvm_log "guest started (qemu pid $TBVM_QEMU_PID); job output will be in $DIR/job.out"
tbvm_wait_guest $((LIMIT + 60)) || true
tbvm_capture_stop "$DIR/capture.pcap" >/dev/null
cat "$DIR/job.out" 2>/dev/null || { echo "no job output; guest console:"; tail -n 30 "$DIR/console.log"; }
rc=$(cat "$DIR/job.rc" 2>/dev/null || echo 1)
tbvm_log "job exit status $rc; files in $DIR"
exit "$rc"
