package rdmacm

import (
	"bytes"
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/tbrdma/tbrdma/internal/hooks"
	"github.com/tbrdma/tbrdma/rdmacm/internal/cmwire"
	"github.com/tbrdma/tbrdma/rdmacm/internal/fsm"
	"github.com/tbrdma/tbrdma/transport/transporttest"
	"github.com/tbrdma/tbrdma/transport/wire"
	"github.com/tbrdma/tbrdma/verbs"
)

// Unit tests of handleREQ's steps (matchREQ, admitREQ, createChild) on a
// dispatcher without goroutines, whose QP1 records what it sends.

// sentMAD is a MAD a fakeGSI was asked to send.
type sentMAD struct {
	to  netip.Addr
	msg cmwire.Message
}

type fakeGSI struct{ sent []sentMAD }

func (g *fakeGSI) Recv(ctx context.Context) (hooks.MADPacket, error) {
	<-ctx.Done()
	return hooks.MADPacket{}, ctx.Err()
}

func (g *fakeGSI) Send(dst netip.AddrPort, mad []byte) error {
	msg, _, err := cmwire.ParseMessage(bytes.Clone(mad))
	if err != nil {
		return err
	}
	g.sent = append(g.sent, sentMAD{dst.Addr(), msg})
	return nil
}

func (g *fakeGSI) Close() error    { return nil }
func (g *fakeGSI) Dropped() uint64 { return 0 }

// take returns what was sent since the last call.
func (g *fakeGSI) take() []sentMAD {
	s := g.sent
	g.sent = nil
	return s
}

func testDispatcher(vctx *verbs.Context) (*dispatcher, *fakeGSI) {
	g := &fakeGSI{}
	return &dispatcher{
		vctx: vctx, gsi: g, cm: &hooks.CMCounters{}, guid: 0x1111,
		conns: map[cmwire.CommID]*ID{}, remote: map[remoteKey]*ID{}, ports: map[portKey]*ID{},
		listeners: map[portKey]*ID{}, ids: map[*ID]struct{}{}, sidrs: map[cmwire.CommID]*ID{},
		sidrPending: map[sidrKey]*ID{}, remoteQP: map[qpKey]*ID{}, timewait: map[remoteKey]twEntry{},
		kick: make(chan struct{}, 1),
	}, g
}

const testPort = 7400

var (
	testPeer  = netip.MustParseAddr("198.18.9.1")
	testLocal = netip.MustParseAddr("198.18.9.2")
)

// testListener adds a listener on PSTCP testPort.
func testListener(d *dispatcher, backlog int) *ID {
	ln := &ID{ps: PSTCP, d: d, state: stateListen}
	ln.listen.backlog = backlog
	d.listeners[portKey{PSTCP, testPort}] = ln
	return ln
}

// testREQ is a REQ from testPeer to testLocal:testPort with a CMA
// header; edit changes its fields before encoding, key signs it.
func testREQ(edit func(*cmwire.REQFields), key *pskKey) cmwire.Message {
	f := cmwire.REQFields{
		LocalCommID: 0xc0ffee, ServiceID: cmwire.ServiceID(cmwire.PSTCP, testPort), LocalCAGUID: 0x2222,
		LocalQPN: 0x123, ResponderResources: 2, InitiatorDepth: 3, TransportType: cmwire.TransportRC,
		StartingPSN: 0x4567, RetryCount: 7, RNRRetryCount: 6, PathMTU: cmwire.MTU(verbs.MTU1024),
		Primary: cmwire.PathFields{LocalGID: wire.GIDFromAddr(testPeer), RemoteGID: wire.GIDFromAddr(testLocal)},
	}
	hdr := cmwire.NewCMAHeader(5000, testPeer, testLocal).Append(f.PrivateData[:0])
	copy(f.PrivateData[len(hdr):], "hello")
	if edit != nil {
		edit(&f)
	}
	if key != nil {
		reservePSK(f.PrivateData[:], false, false)
	}
	mad := cmwire.AppendMAD(nil, 0x77, f)
	if key != nil {
		key.sign(pskREQ, nil, mad)
	}
	msg, _, err := cmwire.ParseMessage(mad)
	if err != nil {
		panic(err)
	}
	return msg
}

// wantREJ checks that exactly one REJ of reason went to testPeer, for
// the REQ of comm ID 0xc0ffee, with private data starting with pd.
func wantREJ(t *testing.T, g *fakeGSI, reason cmwire.RejectReason, pd []byte) {
	t.Helper()
	sent := g.take()
	if len(sent) != 1 || sent[0].msg.Attr() != cmwire.AttrREJ {
		t.Fatalf("sent %d MADs (%v), want one REJ", len(sent), sent)
	}
	rej := sent[0].msg.REJ()
	if sent[0].to != testPeer || rej.Reason() != reason || rej.RemoteCommID() != 0xc0ffee || rej.MessageRejected() != cmwire.KindREQ ||
		!bytes.HasPrefix(rej.PrivateData(), pd) {
		t.Fatalf("REJ to %v: reason %v, remote comm ID %#x, rejecting %v, data %q; want %v to %v for %#x, data %q",
			sent[0].to, rej.Reason(), rej.RemoteCommID(), rej.MessageRejected(), rej.PrivateData()[:len(pd)+4], reason, testPeer, 0xc0ffee, pd)
	}
}

func TestMatchREQ(t *testing.T) {
	now := time.Unix(1000, 0)
	t.Run("listener", func(t *testing.T) {
		d, g := testDispatcher(nil)
		want := testListener(d, 4)
		ln, port, handled := d.matchREQ(now, testPeer, testREQ(nil, nil))
		if ln != want || port != testPort || handled || len(g.sent) != 0 {
			t.Fatalf("matchREQ = %p, %d, %v, sent %d; want the listener %p, %d, false, none", ln, port, handled, len(g.sent), want, testPort)
		}
	})
	t.Run("no listener or service ID", func(t *testing.T) {
		d, g := testDispatcher(nil)
		testListener(d, 4)
		for _, sid := range []uint64{cmwire.ServiceID(cmwire.PSTCP, testPort+1), cmwire.ServiceID(cmwire.PSUDP, testPort), 0x1_0000_0000 | testPort} {
			ln, _, handled := d.matchREQ(now, testPeer, testREQ(func(f *cmwire.REQFields) { f.ServiceID = sid }, nil))
			if ln != nil || handled || len(g.sent) != 0 {
				t.Fatalf("service ID %#x: matchREQ = %p, %v, sent %d; want nil, false, none", sid, ln, handled, len(g.sent))
			}
		}
	})
	t.Run("copy of a live connection's REQ", func(t *testing.T) {
		d, g := testDispatcher(nil)
		msg := testREQ(nil, nil)
		id := &ID{d: d, state: stateConnectRequest, peer: netip.MustParseAddr("198.18.9.9")}
		id.conn = fsm.NewPassive(0xabc, msg, 0)
		d.remote[remoteKey{0x2222, 0xc0ffee}] = id
		if _, _, handled := d.matchREQ(now, testPeer, msg); !handled {
			t.Fatal("a copy of a known REQ was not handled")
		}
		// The first copy gets an MRA, sent where the copy came from.
		sent := g.take()
		if len(sent) != 1 || sent[0].msg.Attr() != cmwire.AttrMRA || sent[0].to != testPeer {
			t.Fatalf("sent %v, want one MRA to %v", sent, testPeer)
		}
	})
	t.Run("copy in timewait", func(t *testing.T) {
		d, g := testDispatcher(nil)
		testListener(d, 4)
		rk := remoteKey{0x2222, 0xc0ffee}
		d.timewait[rk] = twEntry{local: 0xabc, expires: now.Add(time.Second)}
		if _, _, handled := d.matchREQ(now, testPeer, testREQ(nil, nil)); !handled || d.stale != 1 {
			t.Fatalf("handled %v, stale %d; want true, 1", handled, d.stale)
		}
		sent := g.take()
		if len(sent) != 1 || sent[0].msg.Attr() != cmwire.AttrREJ || sent[0].msg.REJ().Reason() != cmwire.RejStaleConn ||
			sent[0].msg.REJ().LocalCommID() != 0xabc {
			t.Fatalf("sent %v, want REJ 10 from comm ID 0xabc", sent)
		}
		// Once the timewait has ended, the copy is a new REQ.
		ln, _, handled := d.matchREQ(now.Add(time.Second), testPeer, testREQ(nil, nil))
		if _, kept := d.timewait[rk]; ln == nil || handled || kept {
			t.Fatalf("after the timewait: listener %p, handled %v, record kept %v", ln, handled, kept)
		}
	})
}

func TestAdmitREQ(t *testing.T) {
	now := time.Unix(1000, 0)
	key, err := newPSK([]byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	type check struct {
		reason cmwire.RejectReason
		pd     []byte
	}
	for _, tc := range []struct {
		name  string
		setup func(d *dispatcher, ln *ID) // ln is nil for "no listener"
		edit  func(*cmwire.REQFields)
		sign  bool
		want  *check // nil: admitted
	}{
		{name: "admitted"},
		{name: "no listener", setup: func(d *dispatcher, ln *ID) { delete(d.listeners, portKey{PSTCP, testPort}) },
			want: &check{cmwire.RejInvalidServiceID, nil}},
		{name: "UD listener", setup: func(d *dispatcher, ln *ID) { ln.ps = PSUDP }, want: &check{cmwire.RejConsumerDefined, nil}},
		{name: "half-open limit", setup: func(d *dispatcher, ln *ID) {
			ln.listen.limits = Limits{MaxHalfOpenPerPeer: 1}
			ln.enterHalfOpen(&ID{}, testPeer)
		}, want: &check{cmwire.RejNoResources, []byte(limitRejectText)}},
		{name: "backlog full", setup: func(d *dispatcher, ln *ID) { ln.listen.pending = 4 }, want: &check{cmwire.RejConsumerDefined, nil}},
		{name: "bound elsewhere", setup: func(d *dispatcher, ln *ID) { ln.local = netip.MustParseAddrPort("198.18.9.3:7400") },
			want: &check{cmwire.RejConsumerDefined, nil}},
		{name: "not RC", edit: func(f *cmwire.REQFields) { f.TransportType = cmwire.TransportUC }, want: &check{cmwire.RejConsumerDefined, nil}},
		{name: "key: signed", setup: func(d *dispatcher, ln *ID) { ln.psk.key = key }, sign: true},
		{name: "key: unsigned", setup: func(d *dispatcher, ln *ID) { ln.psk.key = key },
			want: &check{cmwire.RejConsumerDefined, authRejectData("")}},
		// The key is checked first: an unsigned REQ from a connected
		// peer QP causes no REJ 10 (and no DREQ).
		{name: "key: unsigned from a connected QP", setup: func(d *dispatcher, ln *ID) {
			ln.psk.key = key
			d.remoteQP[qpKey{0x123, 0x2222}] = &ID{}
		}, want: &check{cmwire.RejConsumerDefined, authRejectData("")}},
		{name: "connected QP", setup: func(d *dispatcher, ln *ID) { d.remoteQP[qpKey{0x123, 0x2222}] = &ID{} },
			want: &check{cmwire.RejStaleConn, nil}},
		{name: "connected QP, key not proved", setup: func(d *dispatcher, ln *ID) {
			old := &ID{}
			old.psk.key = key
			d.remoteQP[qpKey{0x123, 0x2222}] = old
		}, want: &check{cmwire.RejStaleConn, nil}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, g := testDispatcher(nil)
			ln := testListener(d, 4)
			if tc.setup != nil {
				tc.setup(d, ln)
			}
			var k *pskKey
			if tc.sign {
				k = key
			}
			msg := testREQ(tc.edit, k)
			a, ok := d.admitREQ(now, testPeer, msg, d.listeners[portKey{PSTCP, testPort}])
			if tc.want != nil {
				if ok {
					t.Fatal("admitted")
				}
				wantREJ(t, g, tc.want.reason, tc.want.pd)
				return
			}
			if !ok || len(g.sent) != 0 {
				t.Fatalf("admitREQ = %v, sent %v; want true, nothing", ok, g.sent)
			}
			if a.hdr == nil || a.hdr.Dst() != testLocal || a.peer != testPeer || (a.reqMAC != [pskMACLen]byte{}) != tc.sign {
				t.Fatalf("admission %+v", a)
			}
		})
	}
}

// The counters each refusal moves.
func TestAdmitREQCounters(t *testing.T) {
	now := time.Unix(1000, 0)
	key, _ := newPSK([]byte("0123456789abcdef0123456789abcdef"))
	d, g := testDispatcher(nil)
	ln := testListener(d, 4)
	ln.listen.limits = Limits{MaxHalfOpenPerPeer: 1}
	ln.enterHalfOpen(&ID{}, testPeer)
	if _, ok := d.admitREQ(now, testPeer, testREQ(nil, nil), ln); ok || d.limitRejects != 1 || d.cm.RejectsLimit.Load() != 1 {
		t.Fatalf("over the limit: ok %v, limitRejects %d, cm %d", ok, d.limitRejects, d.cm.RejectsLimit.Load())
	}
	ln.listen.limits = Limits{}
	ln.psk.key = key
	if _, ok := d.admitREQ(now, testPeer, testREQ(nil, nil), ln); ok || d.authFailures != 1 || d.cm.AuthFailures.Load() != 1 {
		t.Fatalf("unsigned: ok %v, authFailures %d, cm %d", ok, d.authFailures, d.cm.AuthFailures.Load())
	}
	// The same signed REQ twice (a new connection each time, as after
	// the first one's end): the second is a replay.
	signed := testREQ(nil, key)
	if _, ok := d.admitREQ(now, testPeer, signed, ln); !ok {
		t.Fatal("a signed REQ was refused")
	}
	if _, ok := d.admitREQ(now, testPeer, signed, ln); ok || d.replays != 1 || d.authFailures != 2 || d.cm.AuthFailures.Load() != 2 {
		t.Fatalf("replay: ok %v, replays %d, authFailures %d, cm %d", ok, d.replays, d.authFailures, d.cm.AuthFailures.Load())
	}
	g.take()
	wantStale := d.stale + 1
	d.remoteQP[qpKey{0x123, 0x2222}] = &ID{}
	ln.psk.key = nil
	if _, ok := d.admitREQ(now, testPeer, testREQ(nil, nil), ln); ok || d.stale != wantStale {
		t.Fatalf("connected QP: ok %v, stale %d, want %d", ok, d.stale, wantStale)
	}
}

// handleREQ of an admitted REQ: a child in CONNECT_REQUEST, indexed and
// counted on its listener, and the event with the REQ's parameters.
func TestHandleREQCreatesChild(t *testing.T) {
	n := transporttest.NewNetwork(1)
	defer n.Close()
	vctx, err := verbs.NewContext(&verbs.Options{Conn: n.Attach(netip.AddrPortFrom(testLocal, 4791))})
	if err != nil {
		t.Fatal(err)
	}
	defer vctx.Close()
	d, g := testDispatcher(vctx)
	ch, err := CreateEventChannel(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Destroy()
	ln := testListener(d, 4)
	ln.ch = ch
	msg := testREQ(nil, nil)
	var p hooks.MADPacket
	p.From = netip.AddrPortFrom(testPeer, 4791)
	copy(p.MAD[:], msg)
	d.handleREQ(time.Unix(1000, 0), &p, msg)
	if len(g.sent) != 0 {
		t.Fatalf("sent %v, want nothing before Accept", g.sent)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ev, err := ch.GetEvent(ctx)
	if err != nil {
		t.Fatal(err)
	}
	child := ev.ID
	if ev.Type != EventConnectRequest || ev.Listen != ln || child.state != stateConnectRequest {
		t.Fatalf("event %v for listener %p, child state %v", ev.Type, ev.Listen, child.state)
	}
	got := ev.Param
	if got.ResponderResources != 3 || got.InitiatorDepth != 2 || got.RetryCount != 7 || got.RNRRetryCount != 6 ||
		got.QPNum != 0x123 || got.SegmentSize != 0 || !bytes.HasPrefix(got.PrivateData, []byte("hello")) {
		t.Fatalf("param %+v, want the REQ's (responder resources and initiator depth swapped) and its user data", got)
	}
	if child.local != netip.AddrPortFrom(testLocal, testPort) || child.remote != netip.AddrPortFrom(testPeer, 5000) ||
		child.peer != testPeer || child.pathMTU != verbs.MTU1024 || child.passive.req.LocalQPN != 0x123 {
		t.Fatalf("child local %v remote %v peer %v MTU %v", child.local, child.remote, child.peer, child.pathMTU)
	}
	rk := remoteKey{0x2222, 0xc0ffee}
	if d.conns[child.conn.LocalID] != child || d.remote[rk] != child || d.remoteQP[qpKey{0x123, 0x2222}] != child ||
		child.passive.rkey != rk || child.passive.pendingOn != ln || child.passive.halfOn != ln {
		t.Fatal("the child is not indexed")
	}
	if ln.listen.pending != 1 || ln.listen.half.total != 1 || ln.listen.half.byPeer[testPeer] != 1 {
		t.Fatalf("listener pending %d, half-open %+v", ln.listen.pending, ln.listen.half)
	}
}
