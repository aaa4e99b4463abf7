package cli

import (
	"github.com/spf13/cobra"

	"github.com/tbrdma/tbrdma/cmd/tbrdma/internal/perf"
)

// readLatTest is `tbrdma read-lat`, paired with perftest's ib_read_lat: RDMA READ latency: the client posts one READ at a time and times it; the
// server only serves its memory.
var readLatTest = &perftestKind{name: "read-lat", stock: "ib_read_lat", verb: perf.VerbRead, defSize: 2, defIters: 1000}

func newCmdReadLat(f *Factory, runF func(*perftestOptions) error) *cobra.Command {
	return newCmdPerftest(f, readLatTest, runF)
}
