package cli

import (
	"github.com/spf13/cobra"

	"github.com/tbrdma/tbrdma/cmd/tbrdma/internal/perf"
)

// sendLatTest is `tbrdma send-lat`, paired with perftest's ib_send_lat: a
// SEND ping-pong (the client sends first); both sides time their posts and
// print half the round trip.
var sendLatTest = &perftestKind{name: "send-lat", stock: "ib_send_lat", verb: perf.VerbSend, defSize: 2, defIters: 1000}

func newCmdSendLat(f *Factory, runF func(*perftestOptions) error) *cobra.Command {
	return newCmdPerftest(f, sendLatTest, runF)
}
