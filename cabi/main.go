//go:build tbrdma_cabi

// Command cabi is tbrdma's C library: built with -buildmode=c-shared it is
// libibverbs.so.1 and librdmacm.so.1 at once (one file under two names, so a
// process holds one Go runtime), and unmodified rdma-core programs —
// perftest, the ibv_* and rdma_cm tools, pyverbs, C code a learner types —
// run over tbrdma's engine with LD_LIBRARY_PATH pointing at it (or with
// `tbrdma exec`).
//
// It is a client of packages verbs and rdmacm, as the CLI is: it holds no
// RDMA logic of its own, only the mapping between rdma-core's structs,
// dispatch tables and errnos and the Go API. The ABI entry points are C
// (verbs.c, ops.c, rdmacm.c, stubs.c), compiled against the installed
// rdma-core headers; they call the Go functions exported here, whose names
// start with tbgo_. build.sh builds it; docs/cabi.md describes it.
//
// The build tag tbrdma_cabi keeps it out of `go test ./...` and `go build
// ./...`, which must work without a C compiler or the rdma-core headers.
package main

/*
#cgo CFLAGS: -O2 -Wall -Wno-unused-function
#include "tbrdma.h"
*/
import "C"

func main() {}
