package cli

import (
	"github.com/spf13/cobra"

	"github.com/tbrdma/tbrdma/cmd/tbrdma/internal/perf"
)

// atomicLatTest is `tbrdma atomic-lat`, paired with perftest's ib_atomic_lat: atomic latency (-A FETCH_AND_ADD or CMP_AND_SWAP), one at a time; tbrdma
// also checks the values the atomics return or leave.
var atomicLatTest = &perftestKind{name: "atomic-lat", stock: "ib_atomic_lat", verb: perf.VerbAtomic, defSize: 8, defIters: 1000}

func newCmdAtomicLat(f *Factory, runF func(*perftestOptions) error) *cobra.Command {
	return newCmdPerftest(f, atomicLatTest, runF)
}
