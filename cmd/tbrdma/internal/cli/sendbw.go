package cli

import (
	"github.com/spf13/cobra"

	"github.com/tbrdma/tbrdma/cmd/tbrdma/internal/perf"
)

// sendBWTest is `tbrdma send-bw`, paired with perftest's ib_send_bw: SEND
// bandwidth: the client keeps -t SENDs in flight and times their
// completions (each one an ACK from the receiver); the server times the
// receives it completes and prints its own figures.
var sendBWTest = &perftestKind{name: "send-bw", stock: "ib_send_bw", verb: perf.VerbSend, bw: true, defSize: 65536, defIters: 1000}

func newCmdSendBW(f *Factory, runF func(*perftestOptions) error) *cobra.Command {
	return newCmdPerftest(f, sendBWTest, runF)
}
