package cli

import (
	"fmt"

	"github.com/tbrdma/tbrdma/cmd/tbrdma/internal/perf"
	"github.com/tbrdma/tbrdma/verbs"
)

// ibv_ud_pingpong's constants (rdma-core 44, libibverbs/examples/ud_pingpong.c).
const (
	// udPingpongQKey is the Q_Key both sides set on their QP and send to.
	udPingpongQKey verbs.QKey = 0x11111111
	// udPingpongDefaultSize is -s without the flag: rdma-core 44's tool
	// sends 1024-byte messages by default. Interop showed it (1056-byte UDP
	// payloads from the stock tool); a 2048 default here made every
	// datagram end in a local length error on the stock side, whose
	// receive buffers are 1024 + 40 bytes.
	udPingpongDefaultSize = 1024
	// udGRHSize is the room in front of every UD receive buffer: the
	// device writes a 40-byte GRH there (on RoCEv2 over IPv4, the IPv4
	// header in its last 20 bytes), then the message. The stock tool
	// sends from the same offset of its buffer, so the two line up.
	udGRHSize = 40
)

// connectUD brings the UD QP to RTS as ibv_ud_pingpong does (RTR with no
// attribute but the state, RTS with our send PSN) and creates the address
// handle of the peer, whose messages go to its QPN with the common Q_Key.
func (pp *pingpong) connectUD(rem perf.PingpongDest, dgid verbs.GID, sgid uint8) error {
	if err := pp.qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTR}, verbs.QPAttrState); err != nil {
		return fmt.Errorf("failed to modify QP to RTR: %w", err)
	}
	if err := pp.qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: verbs.PSN(pp.my.PSN)},
		verbs.QPAttrState|verbs.QPAttrSQPSN); err != nil {
		return fmt.Errorf("failed to modify QP to RTS: %w", err)
	}
	ah, err := pp.pd.CreateAH(verbs.AHAttr{DGID: dgid, SGIDIndex: sgid, HopLimit: 1, PortNum: uint8(pp.o.IBPort)})
	if err != nil {
		return fmt.Errorf("failed to create AH: %w", err)
	}
	pp.ah, pp.remQPN = ah, verbs.QPN(rem.QPN)
	return nil
}
