#!/bin/sh
# Regenerates every generated table of docs/reliability.md, each between its
# own "<!-- BEGIN name -->" / "<!-- END name -->" markers (nothing else in
# the file is touched):
#
#   RELIABILITY TABLE, BOUNDED FAILURE TABLE   go test ./verbs   (fake time, seconds of CPU)
#   CM BOUNDED FAILURE TABLE                    go test ./rdmacm  (fake time, under a second)
#   soak-cycles                                 go test ./rdmacm  (1 000 connect/disconnect cycles)
#   soak-table                                  go test ./verbs   (64 connections of mixed traffic
#                                               for $SOAK, default 10m)
#   KILL LINKDOWN NETNS TABLE                   go test ./cmd/tbrdma/e2e (real processes in
#                                               network namespaces: root, about 10 minutes)
#
# Usage (from anywhere):   sudo docs/reliability.sh
#        without root:     docs/reliability.sh   (the e2e table is left as it is, and the
#                                                 script says so and exits 1)
# RUNS=5 docs/reliability.sh runs each e2e failure case 5 times (default 3);
# SOAK=1m shortens the soak (the issue asks for 10 minutes).
# The generators run one after another (-p 1 would do the same), so that the
# file is never written by two at once.
set -eu
cd "$(dirname "$0")/.."
doc="$PWD/docs/reliability.md"
runs="${RUNS:-3}"
soak="${SOAK:-10m}"

echo "reliability.sh: verbs fault matrix and bounded failure (fake time)" >&2
go test ./verbs -count=1 -run '^TestReliability' -reliability.out="$doc"
echo "reliability.sh: rdmacm bounded failure (fake time)" >&2
go test ./rdmacm -count=1 -run '^TestCMBoundedFailure$' -reliability.out="$doc"
echo "reliability.sh: rdmacm connect/disconnect cycles" >&2
go test ./rdmacm -count=1 -run '^TestConnectCyclesFlat$' -soak.out="$doc"
echo "reliability.sh: soak, 64 connections of mixed traffic for $soak" >&2
go test ./verbs -count=1 -timeout 60m -run '^TestSoak$' -soak="$soak" -soak.out="$doc"
if [ "$(id -u)" != 0 ]; then
	echo "reliability.sh: the kill/link-down/namespace-delete table needs root (network namespaces): run sudo $0; that table was not regenerated" >&2
	exit 1
fi
echo "reliability.sh: kill, link-down and namespace-delete, $runs runs each (real processes, about 10 minutes)" >&2
go test ./cmd/tbrdma/e2e -count=1 -timeout 60m -run '^TestFailureMatrix$' -reliability.out="$doc" -failure.runs="$runs"
echo "reliability.sh: rewrote $doc" >&2
