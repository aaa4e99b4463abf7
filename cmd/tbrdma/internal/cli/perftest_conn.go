package cli

import (
	"errors"
	"fmt"
	"time"

	"github.com/tbrdma/tbrdma/cmd/tbrdma/internal/perf"
	"github.com/tbrdma/tbrdma/verbs"
)

// This file holds -c, the connection type of the perftest commands, as
// perftest 4.5 runs it: RC for every test, UC for the WRITE and SEND
// tests, UD for the SEND tests. UC and UD have no acknowledgements: a
// request completes once sent, a lost packet loses its message. A UD
// message is one packet (at most the MTU), addressed by an address handle
// to the peer's QPN with perftest's Q_Key, and lands behind a 40-byte GRH.

// connHelp is -c's help text for test k.
func connHelp(k *perftestKind) string {
	switch k.verb {
	case perf.VerbSend:
		return "QP `type`: RC, UC or UD (UD: messages of at most the MTU)"
	case perf.VerbWrite:
		return "QP `type`: RC or UC"
	}
	return "QP `type`: RC only (perftest runs READ and atomic tests over RC)"
}

// connLong is what the command's long help says of -c, after "over an
// RC QP".
func connLong(k *perftestKind) string {
	switch k.verb {
	case perf.VerbSend:
		return " (-c UC or UD: unreliable, as perftest)"
	case perf.VerbWrite:
		return " (-c UC: unreliable, as perftest)"
	}
	return ""
}

// checkConn checks -c for test k as perftest does: UC with the WRITE and
// SEND tests, UD with the SEND tests only.
func checkConn(k *perftestKind, conn string) error {
	switch {
	case conn == "RC":
		return nil
	case conn == "UC" && (k.verb == perf.VerbRead || k.verb == perf.VerbAtomic):
		return fmt.Errorf("invalid -c UC: UC carries no READs or atomics; perftest runs %s over RC only: drop -c (UC is for write-bw, write-lat, send-bw and send-lat)", k.stock)
	case conn == "UC":
		return nil
	case conn == "UD" && k.verb != perf.VerbSend:
		return fmt.Errorf("invalid -c UD: UD carries SENDs only, as perftest allows it for send-bw and send-lat; run %s with -c RC or UC", k.name)
	case conn == "UD":
		return nil
	}
	want := "RC"
	switch k.verb {
	case perf.VerbSend:
		want = "RC, UC or UD"
	case perf.VerbWrite:
		want = "RC or UC"
	}
	return fmt.Errorf("invalid -c %q: %s runs over %s", conn, k.name, want)
}

// checkUnreliable refuses what tbrdma does not run over UC or UD.
func (o *perftestOptions) checkUnreliable() error {
	if o.Conn == "RC" {
		return nil
	}
	if o.RDMACM {
		return FlagErrorf("-c %s works with the TCP exchange only, not with -R (perftest's -R has no UC either; tbrdma's rdma_cm connects RC QPs): drop -R, or run -c RC", o.Conn)
	}
	if o.Conn == "UD" && (o.LargeSegments || o.SegmentSize != 0) {
		return FlagErrorf("--large-segments does not apply to -c UD: a UD message is one packet of at most the MTU: drop --large-segments, or run -c RC or UC")
	}
	if o.Conn == "UD" && !o.All && o.Size > 4096 && o.sizeGiven {
		return FlagErrorf("invalid -s %d with -c UD: a UD message is one packet, at most the MTU (4096 bytes or less): give -s 4096 or less, or no -s (perftest then sends MTU-sized messages)", o.Size)
	}
	return nil
}

// connQPType is the QP type of -c conn.
func connQPType(conn string) verbs.QPType {
	switch conn {
	case "UC":
		return verbs.QPTypeUC
	case "UD":
		return verbs.QPTypeUD
	}
	return verbs.QPTypeRC
}

// capUDSize applies perftest's MTU rule of -c UD once the MTU is agreed:
// -a runs the sizes up to the MTU; a default -s larger than the MTU becomes
// the MTU, with perftest's note; a larger -s given on the command line
// fails.
func (t *perftest) capUDSize() error {
	o := t.o
	if o.Conn != "UD" {
		return nil
	}
	mtu := t.mtu.Bytes()
	o.udMTU = mtu
	if o.Size <= mtu {
		return nil
	}
	if o.sizeGiven && !o.All {
		return fmt.Errorf("-s %d with -c UD: a UD message is one packet, and the MTU agreed with the peer is %d bytes (perftest: \"Max message size in UD cannot be greater than MTU\"): run -s %d or less", o.Size, mtu, mtu)
	}
	fmt.Fprintf(o.IO.ErrOut, " Max msg size in UD is MTU %d\n Changing to this MTU\n", mtu)
	o.Size = mtu
	return nil
}

// perftestAliveCheck is perftest's check_alive period: its SEND bandwidth
// server gives up after one to two of them without a message.
const perftestAliveCheck = 60 * time.Second

// aliveCheck is send-bw's server wait for the next message (UC and UD; 0,
// no bound, over RC, whose losses are resent).
func (t *perftest) aliveCheck() time.Duration {
	o := t.o
	if o.Conn == "RC" || o.Kind.verb != perf.VerbSend || !o.Kind.bw {
		return 0
	}
	if o.aliveCheck > 0 {
		return o.aliveCheck
	}
	return perftestAliveCheck
}

// connectUnreliable moves a UC or UD qp to RTR and RTS as perftest does:
// UC with the path (address, MTU, the peer's QPN and PSN) but none of
// RC's retry and read attributes; UD with the state alone, then an
// address handle for the peer (t.ud).
func (t *perftest) connectUnreliable(qp *verbs.QP, my, rem perf.Dest) error {
	o := t.o
	av := verbs.AHAttr{DGID: verbs.GID(rem.GID), SGIDIndex: uint8(max(o.GIDIdx, 0)), HopLimit: 0xFF, PortNum: 1}
	rtr := &verbs.QPAttr{State: verbs.QPStateRTR}
	mask := verbs.QPAttrState
	if o.Conn == "UC" {
		rtr.AH, rtr.PathMTU, rtr.DestQPN, rtr.RQPSN, rtr.SegmentSize = av, t.mtu, verbs.QPN(rem.QPN), verbs.PSN(rem.PSN), t.seg
		mask |= verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN
		if t.seg != 0 {
			mask |= verbs.QPAttrSegmentSize
		}
	}
	if err := qp.Modify(rtr, mask); err != nil {
		return fmt.Errorf("failed to modify QP to RTR: %w", err)
	}
	if err := qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: verbs.PSN(my.PSN)}, verbs.QPAttrState|verbs.QPAttrSQPSN); err != nil {
		return fmt.Errorf("failed to modify QP to RTS: %w", err)
	}
	if o.Conn != "UD" {
		return nil
	}
	if rem.GID == ([16]byte{}) {
		return errors.New("failed to create AH: the peer sent no GID: give the peer's stock perftest -x with its RoCE GID index")
	}
	ah, err := t.pd.CreateAH(av)
	if err != nil {
		return fmt.Errorf("failed to create AH: %w", err)
	}
	t.ud = append(t.ud, perf.UDPeer{AH: ah, QPN: verbs.QPN(rem.QPN)})
	return nil
}

// closeAHs releases -c UD's address handles (before the PD).
func (t *perftest) closeAHs() {
	for _, p := range t.ud {
		p.AH.Close()
	}
	t.ud = nil
}
