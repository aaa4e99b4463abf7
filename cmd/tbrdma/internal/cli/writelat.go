package cli

import (
	"github.com/spf13/cobra"

	"github.com/tbrdma/tbrdma/cmd/tbrdma/internal/perf"
)

// writeLatTest is `tbrdma write-lat`, paired with perftest's ib_write_lat: a
// ping-pong of RDMA WRITEs (the server writes first), each side polling the
// last byte of its buffer for the peer's iteration count; both sides print
// half the round trip.
var writeLatTest = &perftestKind{name: "write-lat", stock: "ib_write_lat", verb: perf.VerbWrite, defSize: 2, defIters: 1000}

func newCmdWriteLat(f *Factory, runF func(*perftestOptions) error) *cobra.Command {
	return newCmdPerftest(f, writeLatTest, runF)
}
