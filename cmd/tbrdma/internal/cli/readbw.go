package cli

import (
	"github.com/spf13/cobra"

	"github.com/tbrdma/tbrdma/cmd/tbrdma/internal/perf"
)

// readBWTest is `tbrdma read-bw`, paired with perftest's ib_read_bw: RDMA
// READ bandwidth: the client keeps -t READs in flight (at most -o on the
// wire); the server prints the report the client sends at the end.
var readBWTest = &perftestKind{name: "read-bw", stock: "ib_read_bw", verb: perf.VerbRead, bw: true, defSize: 65536, defIters: 1000}

func newCmdReadBW(f *Factory, runF func(*perftestOptions) error) *cobra.Command {
	return newCmdPerftest(f, readBWTest, runF)
}
