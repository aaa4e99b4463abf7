package fsm

import (
	"testing"
	"time"

	"github.com/tbrdma/tbrdma/rdmacm/internal/cmwire"
)

func sidrREQ(id cmwire.CommID) []byte {
	return cmwire.AppendMAD(nil, 0x2_00000000|uint64(id), cmwire.SIDRREQFields{RequestID: id, PKey: 0xFFFF,
		ServiceID: cmwire.ServiceID(cmwire.PSUDP, 7174)})
}

func sidrREP(id cmwire.CommID, st cmwire.SIDRStatus) []byte {
	return cmwire.AppendMAD(nil, 0x2_00000000|uint64(id), cmwire.SIDRREPFields{RequestID: id, Status: st, QPN: 0x22,
		QKey: cmwire.RDMAUDPQKey})
}

func TestSIDRTiming(t *testing.T) {
	if st := SIDRTiming(20, 15); st.Interval != 4096*time.Millisecond || st.MaxRetries != 15 {
		t.Errorf("SIDR timing %+v", st)
	}
	if st := SIDRTiming(3, 2); st.Interval != time.Millisecond {
		t.Errorf("SIDR timing for a tiny timeout %+v", st)
	}
}

// TestSIDRUnreachable: 16 SIDR_REQs 4.096 s apart, then Unreachable at
// 16 × 4.096 s.
func TestSIDRUnreachable(t *testing.T) {
	s := NewSIDR(9, 0x2_00000009, SIDRTiming(20, 15))
	sent := len(s.Send(t0, sidrREQ(9)).Send)
	now := t0
	var last Result
	for !s.Done() {
		if d := s.Deadline().Sub(now); d != 4096*time.Millisecond {
			t.Fatalf("next timer in %v", d)
		}
		now = s.Deadline()
		if r := s.Tick(now.Add(-time.Nanosecond)); len(r.Send) != 0 || r.Event != EvNone {
			t.Fatal("Tick before the deadline acted")
		}
		last = s.Tick(now)
		sent += len(last.Send)
	}
	if sent != 16 || last.Event != EvUnreachable || now.Sub(t0) != 16*4096*time.Millisecond {
		t.Fatalf("%d SIDR_REQs, event %v at %v", sent, last.Event, now.Sub(t0))
	}
	if r := s.Tick(now.Add(time.Hour)); r.Event != EvNone || len(r.Send) != 0 {
		t.Fatal("Tick after the end acted")
	}
}

// TestSIDRReply: the reply with our request ID ends the resolution; one
// for another ID, a second reply and a reply after Cancel are ignored.
func TestSIDRReply(t *testing.T) {
	s := NewSIDR(9, 0x2_00000009, SIDRTiming(20, 15))
	if r := s.Handle(t0, msg(t, sidrREP(9, 0))); r.Event != EvNone {
		t.Fatal("reply before the request was sent accepted")
	}
	s.Send(t0, sidrREQ(9))
	r := s.Tick(s.Deadline())
	if len(r.Send) != 1 || !s.Deadline().Equal(t0.Add(2*4096*time.Millisecond)) {
		t.Fatalf("retransmission: %d sent, next %v", len(r.Send), s.Deadline().Sub(t0))
	}
	if r := s.Handle(t0, msg(t, sidrREP(10, 0))); r.Event != EvNone {
		t.Fatal("reply to another request accepted")
	}
	if r := s.Handle(t0, msg(t, sidrREQ(9))); r.Event != EvNone {
		t.Fatal("a SIDR_REQ accepted as a reply")
	}
	r = s.Handle(t0, msg(t, sidrREP(9, cmwire.SIDRReject)))
	if r.Event != EvSIDRReply || r.Msg.SIDRREP().Status() != cmwire.SIDRReject || !s.Done() || !s.Deadline().IsZero() {
		t.Fatalf("reply: %v done=%v", r.Event, s.Done())
	}
	if r := s.Handle(t0, msg(t, sidrREP(9, 0))); r.Event != EvNone {
		t.Fatal("second reply accepted")
	}
	c := NewSIDR(11, 1, SIDRTiming(20, 15))
	c.Send(t0, sidrREQ(11))
	c.Cancel()
	if r := c.Tick(t0.Add(time.Hour)); len(r.Send) != 0 || r.Event != EvNone {
		t.Fatal("cancelled resolution still resends")
	}
}
