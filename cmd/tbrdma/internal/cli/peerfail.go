package cli

import (
	"github.com/tbrdma/tbrdma/cmd/tbrdma/internal/perf"
	"github.com/tbrdma/tbrdma/verbs"
)

// peerLabel is role followed by the address of qp's peer ("receiver
// 198.18.0.2"), for cat's messages: perf.PeerLabel, which the test loops'
// messages use too.
func peerLabel(role string, qp *verbs.QP) string { return perf.PeerLabel(role, qp) }
