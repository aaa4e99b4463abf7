package cli

import (
	"github.com/spf13/cobra"

	"github.com/tbrdma/tbrdma/cmd/tbrdma/internal/perf"
)

// writeBWTest is `tbrdma write-bw`, paired with perftest's ib_write_bw: RDMA WRITE bandwidth: the client keeps -t WRITEs in flight; the server
// prints the report the client sends at the end.
var writeBWTest = &perftestKind{name: "write-bw", stock: "ib_write_bw", verb: perf.VerbWrite, bw: true, defSize: 65536, defIters: 5000}

func newCmdWriteBW(f *Factory, runF func(*perftestOptions) error) *cobra.Command {
	return newCmdPerftest(f, writeBWTest, runF)
}
