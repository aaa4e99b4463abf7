#!/bin/bash
# tbrdma ping / serve against the stock rping on rdma_rxe: the rping-*
# pairings of interop/matrix.txt (tbrdma ping -> rping -s, and
# rping -c -> tbrdma serve), with the same harness, checks and table as the
# whole matrix. Usage (as root): interop/ping-serve.sh [-o DIR] [-k]
exec "$(dirname "${BASH_SOURCE[0]}")/run.sh" "$@" 'rping-*'
