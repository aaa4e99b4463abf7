package fsm

import (
	"testing"
	"time"

	"github.com/tbrdma/tbrdma/rdmacm/internal/cmwire"
	"github.com/tbrdma/tbrdma/transport/wire"
)

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func msg(t *testing.T, b []byte) cmwire.Message {
	t.Helper()
	m, _, err := cmwire.ParseMessage(b)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func reqMAD(local cmwire.CommID, qpn wire.QPN) []byte {
	f := cmwire.REQFields{LocalCommID: local, LocalQPN: qpn, ServiceID: cmwire.ServiceID(cmwire.PSTCP, 7174),
		RemoteCMResponseTimeout: 20, LocalCMResponseTimeout: 20, MaxCMRetries: 15}
	f.Primary.LocalACKTimeout = 19
	return cmwire.AppendMAD(nil, 0x2_00000001, f)
}

func repMAD(local, remote cmwire.CommID, qpn wire.QPN) []byte {
	return cmwire.AppendMAD(nil, 0x2_00000001, cmwire.REPFields{LocalCommID: local, RemoteCommID: remote, LocalQPN: qpn})
}

func attrs(r Result) []cmwire.AttrID {
	var a []cmwire.AttrID
	for _, m := range r.Send {
		a = append(a, cmwire.AttrID(m[16])<<8|cmwire.AttrID(m[17]))
	}
	return a
}

func TestTiming(t *testing.T) {
	at := ActiveTiming(20, 18, 15)
	if at.Interval != 6144*time.Millisecond || at.MaxRetries != 15 || at.TimeWait != 2048*time.Millisecond {
		t.Errorf("active timing %+v", at)
	}
	pt := PassiveTiming(msg(t, reqMAD(1, 0x11)).REQ())
	if pt.Interval != 4096*time.Millisecond || pt.MaxRetries != 15 || pt.TimeWait != 2048*time.Millisecond {
		t.Errorf("passive timing %+v", pt)
	}
}

// TestActiveUnreachable: 1 + MaxRetries REQs, one interval apart, then
// Unreachable.
func TestActiveUnreachable(t *testing.T) {
	c := NewActive(7, 1, 0x11, ActiveTiming(20, 18, 15))
	r := c.Connect(t0, reqMAD(7, 0x11))
	sent := len(r.Send)
	now := t0
	for c.State() == REQSent {
		if c.Deadline().Sub(now) != 6144*time.Millisecond {
			t.Fatalf("next deadline after %v", c.Deadline().Sub(now))
		}
		now = c.Deadline()
		if r := c.Tick(now.Add(-1)); len(r.Send) != 0 || r.Event != EvNone {
			t.Fatal("early tick acted")
		}
		r = c.Tick(now)
		sent += len(r.Send)
	}
	if r.Event != EvUnreachable || sent != 16 || now.Sub(t0) != 16*6144*time.Millisecond {
		t.Fatalf("event %v after %d REQs and %v", r.Event, sent, now.Sub(t0))
	}
	if !c.Deadline().IsZero() {
		t.Error("timer still armed")
	}
}

// TestActiveICMPUnreachable: an ICMP error ends a connection whose REQ is
// outstanding, sending nothing and leaving no timer; a connection the peer
// has answered (MRA) or an idle one is left as it is.
func TestActiveICMPUnreachable(t *testing.T) {
	c := NewActive(7, 1, 0x11, ActiveTiming(20, 18, 15))
	if c.Unreachable() {
		t.Fatal("Idle: Unreachable reported true")
	}
	c.Connect(t0, reqMAD(7, 0x11))
	if !c.Unreachable() || c.State() != Closed || !c.Deadline().IsZero() {
		t.Fatalf("REQSent: after Unreachable state %v, deadline %v", c.State(), c.Deadline())
	}
	if r := c.Tick(t0.Add(time.Hour)); len(r.Send) != 0 || r.Event != EvNone {
		t.Fatalf("closed connection's tick: %v, %d MADs", r.Event, len(r.Send))
	}

	c = NewActive(8, 1, 0x11, ActiveTiming(20, 18, 15))
	c.Connect(t0, reqMAD(8, 0x11))
	mra := cmwire.AppendMAD(nil, 0x2_00000001, cmwire.MRAFields{RemoteCommID: 8, MessageMRAed: cmwire.KindREQ, ServiceTimeout: 20})
	c.Handle(t0, msg(t, mra))
	if st := c.State(); st != MRAREQRcvd || c.Unreachable() || c.State() != st {
		t.Fatalf("after an MRA: state %v, Unreachable changed it to %v", st, c.State())
	}
}

func TestActiveConnectDisconnect(t *testing.T) {
	c := NewActive(7, 1, 0x11, ActiveTiming(20, 18, 15))
	c.Connect(t0, reqMAD(7, 0x11))
	// MRA stretches the wait.
	mra := cmwire.AppendMAD(nil, 1, cmwire.MRAFields{LocalCommID: 9, RemoteCommID: 7, ServiceTimeout: 24})
	c.Handle(t0, msg(t, mra))
	if c.State() != MRAREQRcvd || c.Deadline().Sub(t0) != 65536*time.Millisecond+6144*time.Millisecond {
		t.Fatalf("after MRA: %v, wait %v", c.State(), c.Deadline().Sub(t0))
	}
	r := c.Handle(t0, msg(t, repMAD(9, 7, 0x22)))
	if r.Event != EvGotREP || c.State() != REPRcvd || c.RemoteID != 9 || c.RemoteQPN != 0x22 || !c.Deadline().IsZero() {
		t.Fatalf("after REP: %v %v", r.Event, c.State())
	}
	r = c.SendRTU(t0, nil)
	if r.Event != EvEstablished || len(r.Send) != 1 || attrs(r)[0] != cmwire.AttrRTU {
		t.Fatalf("RTU: %+v", r)
	}
	rtu := msg(t, r.Send[0]).RTU()
	if rtu.LocalCommID() != 7 || rtu.RemoteCommID() != 9 {
		t.Fatal("RTU comm IDs")
	}
	// Duplicate REP → RTU again.
	if r := c.Handle(t0, msg(t, repMAD(9, 7, 0x22))); len(r.Send) != 1 || attrs(r)[0] != cmwire.AttrRTU {
		t.Fatalf("duplicate REP: %v", attrs(r))
	}
	// Disconnect: DREQ with the peer's QPN, retransmitted, DREP ends it.
	r = c.Disconnect(t0)
	if c.State() != DREQSent || msg(t, r.Send[0]).DREQ().RemoteQPN() != 0x22 {
		t.Fatal("DREQ")
	}
	if r := c.Tick(c.Deadline()); len(r.Send) != 1 {
		t.Fatal("DREQ not resent")
	}
	drep := cmwire.AppendMAD(nil, 1, cmwire.DREPFields{LocalCommID: 9, RemoteCommID: 7})
	r = c.Handle(t0, msg(t, drep))
	if r.Event != EvDisconnected || c.State() != TimeWait {
		t.Fatalf("DREP: %v %v", r.Event, c.State())
	}
	// Duplicate DREQ in timewait → DREP.
	dreq := cmwire.AppendMAD(nil, 1, cmwire.DREQFields{LocalCommID: 9, RemoteCommID: 7, RemoteQPN: 0x11})
	if r := c.Handle(t0, msg(t, dreq)); len(r.Send) != 1 || attrs(r)[0] != cmwire.AttrDREP {
		t.Fatal("no DREP in timewait")
	}
	if r := c.Tick(t0.Add(2048 * time.Millisecond)); r.Event != EvTimewaitExit || c.State() != Closed {
		t.Fatalf("timewait: %v %v", r.Event, c.State())
	}
}

func TestActiveRejected(t *testing.T) {
	c := NewActive(7, 1, 0x11, ActiveTiming(20, 18, 15))
	c.Connect(t0, reqMAD(7, 0x11))
	rej := cmwire.AppendMAD(nil, 1, cmwire.REJFields{RemoteCommID: 7, Reason: cmwire.RejInvalidServiceID})
	r := c.Handle(t0, msg(t, rej))
	if r.Event != EvRejected || r.Msg.REJ().Reason() != cmwire.RejInvalidServiceID || c.State() != Closed {
		t.Fatalf("%v %v", r.Event, c.State())
	}
}

func TestPassive(t *testing.T) {
	req := msg(t, reqMAD(7, 0x11))
	c := NewPassive(9, req, 0x22)
	// Duplicate REQ before accept: MRA.
	if r := c.Handle(t0, req); len(r.Send) != 1 || attrs(r)[0] != cmwire.AttrMRA || c.State() != MRAREQSent {
		t.Fatalf("dup REQ: %v %v", attrs(r), c.State())
	}
	r := c.Accept(t0, repMAD(9, 7, 0x22))
	if len(r.Send) != 1 || c.State() != REPSent {
		t.Fatal("accept")
	}
	// Duplicate REQ after accept: the REP again.
	if r := c.Handle(t0, req); len(r.Send) != 1 || attrs(r)[0] != cmwire.AttrREP {
		t.Fatalf("dup REQ: %v", attrs(r))
	}
	if r := c.Tick(t0.Add(4096 * time.Millisecond)); len(r.Send) != 1 {
		t.Fatal("REP not retransmitted")
	}
	rtu := cmwire.AppendMAD(nil, 1, cmwire.RTUFields{LocalCommID: 7, RemoteCommID: 9})
	if r := c.Handle(t0, msg(t, rtu)); r.Event != EvEstablished || c.State() != Established {
		t.Fatal("RTU")
	}
	// DREQ with the wrong QPN is dropped; with ours it disconnects.
	bad := cmwire.AppendMAD(nil, 1, cmwire.DREQFields{LocalCommID: 7, RemoteCommID: 9, RemoteQPN: 0x33})
	if r := c.Handle(t0, msg(t, bad)); r.Event != EvNone || c.State() != Established {
		t.Fatal("bad DREQ accepted")
	}
	dreq := cmwire.AppendMAD(nil, 1, cmwire.DREQFields{LocalCommID: 7, RemoteCommID: 9, RemoteQPN: 0x22})
	if r := c.Handle(t0, msg(t, dreq)); r.Event != EvDisconnected || c.State() != DREQRcvd {
		t.Fatal("DREQ")
	}
	if r := c.Disconnect(t0); len(r.Send) != 1 || attrs(r)[0] != cmwire.AttrDREP || c.State() != TimeWait {
		t.Fatal("DREP")
	}
}

func TestPassiveUnreachable(t *testing.T) {
	c := NewPassive(9, msg(t, reqMAD(7, 0x11)), 0x22)
	c.Accept(t0, repMAD(9, 7, 0x22))
	var r Result
	n := 1
	for c.State() == REPSent {
		r = c.Tick(c.Deadline())
		n += len(r.Send)
	}
	if r.Event != EvUnreachable || n != 16 {
		t.Fatalf("%v after %d REPs", r.Event, n)
	}
}

func TestDestroy(t *testing.T) {
	c := NewActive(7, 1, 0x11, ActiveTiming(20, 18, 15))
	c.Connect(t0, reqMAD(7, 0x11))
	r := c.Destroy(t0, 0x0102030405060708)
	rej := msg(t, r.Send[0]).REJ()
	if rej.Reason() != cmwire.RejTimeout || rej.ARI()[0] != 1 || rej.ARI()[7] != 8 || c.State() != Closed {
		t.Fatalf("destroy in REQ_SENT: %v", rej.Fields())
	}
}
