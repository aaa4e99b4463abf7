package rdmacm_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tbrdma/tbrdma/rdmacm"
	"github.com/tbrdma/tbrdma/rdmacm/internal/cmwire"
	"github.com/tbrdma/tbrdma/transport/transporttest"
	"github.com/tbrdma/tbrdma/transport/wire"
	"github.com/tbrdma/tbrdma/verbs"
)

var (
	keyA = []byte("tbrdma test key A, 32 bytes long")
	keyB = []byte("tbrdma test key B, 32 bytes long")
)

func cmCounter(vctx *verbs.Context, k verbs.CMCounter) uint64 { return vctx.Counters().CM[k] }

// pskListener listens on port of p.b with key (nil: none) through the raw
// ID API and returns its channel.
func pskListener(t testing.TB, p *pair, port uint16, key []byte) *rdmacm.EventChannel {
	t.Helper()
	sch, err := rdmacm.CreateEventChannel(&rdmacm.ChannelOptions{PSK: key})
	must(t, err)
	t.Cleanup(func() { sch.Destroy() })
	lid, err := sch.CreateID(p.b, rdmacm.PSTCP)
	must(t, err)
	t.Cleanup(func() { lid.Destroy() })
	must(t, lid.Bind(netip.AddrPortFrom(netip.IPv4Unspecified(), port)))
	must(t, lid.Listen(0))
	return sch
}

// pskClient is clientTo with a key on the ID (nil: none).
func pskClient(t testing.TB, p *pair, port uint16, key []byte) (*rdmacm.EventChannel, *rdmacm.ID) {
	t.Helper()
	ch, id, _ := clientTo(t, p.a, fmt.Sprintf("%v:%d", p.b.LocalAddr().Addr(), port))
	t.Cleanup(func() { id.Destroy(); ch.Destroy() })
	if key != nil {
		must(t, id.SetPSK(key))
	}
	return ch, id
}

// TestPSKConnect: the same key on both ends (Dial and Listen): the
// connection comes up, the private data arrive without the trailer, data
// flows, and no authentication failure is counted. The REQ, REP and RTU on
// the wire carry the 32-byte trailer.
func TestPSKConnect(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPair(t, false)
		defer p.close()
		var mu sync.Mutex
		trailers := map[cmwire.AttrID]bool{}
		p.net.SetFilter(func(d transporttest.Dir, pkt []byte) transporttest.Verdict {
			if a := madAttr(pkt); a == cmwire.AttrREQ || a == cmwire.AttrREP || a == cmwire.AttrRTU {
				body := pkt[20+24 : 20+256]
				mu.Lock()
				trailers[a] = bytes.Equal(body[len(body)-32:][:4], []byte{'t', 'b', 'K', 1})
				mu.Unlock()
			}
			return transporttest.Pass
		})
		l, err := rdmacm.Listen(p.b, netip.AddrPortFrom(netip.IPv4Unspecified(), 7500), &rdmacm.ListenOptions{
			EndpointOptions: rdmacm.EndpointOptions{PSK: keyA},
			Param: func(req *rdmacm.Event) (*rdmacm.ConnParam, error) {
				return &rdmacm.ConnParam{PrivateData: append([]byte("welcome, "), req.PrivateData()[:6]...), ResponderResources: 1, InitiatorDepth: 1, RNRRetryCount: 7}, nil
			}})
		must(t, err)
		defer l.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		accepted := make(chan *rdmacm.Conn, 1)
		go func() {
			c, err := l.Accept(ctx)
			if err != nil {
				t.Error(err)
			}
			accepted <- c
		}()
		c, err := rdmacm.Dial(ctx, p.a, "198.18.7.2:7500", &rdmacm.DialOptions{EndpointOptions: rdmacm.EndpointOptions{PSK: keyA},
			Param: &rdmacm.ConnParam{PrivateData: []byte("client"), ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}})
		must(t, err)
		s := <-accepted
		if s == nil {
			t.FailNow()
		}
		if !bytes.Equal(c.PrivateData(), append([]byte("welcome, client"), make([]byte, 196-15)...)) {
			t.Errorf("client got %q", c.PrivateData())
		}
		if !bytes.Equal(s.PrivateData(), append([]byte("client"), make([]byte, 50)...)) {
			t.Errorf("server got %q", s.PrivateData())
		}
		exchange(t, c, s, "authenticated")
		synctest.Wait()
		mu.Lock()
		if !trailers[cmwire.AttrREQ] || !trailers[cmwire.AttrREP] || !trailers[cmwire.AttrRTU] {
			t.Errorf("trailers on the wire: %v", trailers)
		}
		mu.Unlock()
		if n := cmCounter(p.a, verbs.CMAuthFailures) + cmCounter(p.b, verbs.CMAuthFailures); n != 0 {
			t.Errorf("%d authentication failures", n)
		}
		must(t, c.Close())
		<-s.Done()
		must(t, s.Close())
	})
}

// TestPSKWithSegmentAndPrivateData: the key trailer coexists with the
// large-segment trailer and the application's own private data, at the
// documented limits (REQ 16 bytes, REP 156).
func TestPSKWithSegmentAndPrivateData(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPair(t, false)
		defer p.close()
		sch := pskListener(t, p, 7501, keyA)
		cch, cid := pskClient(t, p, 7501, keyA)
		if err := cid.Connect(&rdmacm.ConnParam{PrivateData: make([]byte, 17), SegmentSize: 32768}); !errors.Is(err, rdmacm.ErrInvalidArgument) {
			t.Fatalf("17 bytes with a key and a segment offer: %v", err)
		}
		if err := cid.Connect(&rdmacm.ConnParam{PrivateData: make([]byte, 25)}); !errors.Is(err, rdmacm.ErrInvalidArgument) {
			t.Fatalf("25 bytes with a key: %v", err)
		}
		cpd := []byte("0123456789abcdef") // 16 bytes
		must(t, cid.Connect(&rdmacm.ConnParam{PrivateData: cpd, ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7, SegmentSize: 32768}))
		req := waitEvent(t, sch, rdmacm.EventConnectRequest)
		defer req.ID.Destroy()
		if !bytes.Equal(req.PrivateData(), append(bytes.Clone(cpd), make([]byte, 40)...)) || req.Param.SegmentSize != 32768 {
			t.Fatalf("request: %q, segment %d", req.PrivateData(), req.Param.SegmentSize)
		}
		newEnd(t, req.ID)
		spd := bytes.Repeat([]byte{'s'}, 156)
		if err := req.ID.Accept(&rdmacm.ConnParam{PrivateData: append(bytes.Clone(spd), 's'), SegmentSize: 32768}); !errors.Is(err, rdmacm.ErrInvalidArgument) {
			t.Fatalf("157 bytes in the REP with a key and a segment: %v", err)
		}
		must(t, req.ID.Accept(&rdmacm.ConnParam{PrivateData: spd, ResponderResources: 1, InitiatorDepth: 1, RNRRetryCount: 7, SegmentSize: 32768}))
		est := waitEvent(t, cch, rdmacm.EventEstablished)
		sest := waitEvent(t, sch, rdmacm.EventEstablished)
		if !bytes.Equal(est.PrivateData(), append(bytes.Clone(spd), make([]byte, 40)...)) || est.Param.SegmentSize != 32768 || sest.Param.SegmentSize != 32768 {
			t.Fatalf("established: %q, segment %d/%d", est.PrivateData(), est.Param.SegmentSize, sest.Param.SegmentSize)
		}
	})
}

// dialErr dials port of p.b from p.a with key and returns the error.
func dialErr(t *testing.T, p *pair, port uint16, key []byte) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := rdmacm.Dial(ctx, p.a, fmt.Sprintf("198.18.7.2:%d", port), &rdmacm.DialOptions{EndpointOptions: rdmacm.EndpointOptions{PSK: key}})
	if err == nil {
		c.Close()
		return errors.New("Dial succeeded")
	}
	return err
}

// TestPSKRefused: a wrong key, a key on the active side only, and a key on
// the passive side only are all refused, with errors that name the key,
// and counted where the check failed. The passive side's connection (when
// one was made) ends REJECTED with the same error; no state is left.
func TestPSKRefused(t *testing.T) {
	cases := []struct {
		name                 string
		client, server       []byte
		local                bool // the active side refused the REP
		serverEvent          bool // the server got a CONNECT_REQUEST
		clientFail, srvFails uint64
	}{
		{"wrong key", keyA, keyB, false, false, 0, 1},
		{"client key only", keyA, nil, true, true, 1, 0},
		{"server key only", nil, keyB, false, false, 0, 1},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := newPair(t, false)
				defer p.close()
				port := uint16(7510 + i)
				sch := pskListener(t, p, port, tc.server)
				errc := make(chan error, 1)
				go func() { errc <- dialErr(t, p, port, tc.client) }()
				if tc.serverEvent {
					req := waitEvent(t, sch, rdmacm.EventConnectRequest)
					newEnd(t, req.ID)
					must(t, req.ID.Accept(nil))
					ev := waitEvent(t, sch, rdmacm.EventRejected)
					if !errors.Is(ev.Err, rdmacm.ErrAuthFailed) {
						t.Errorf("server: %v, want an authentication failure", ev.Err)
					}
					must(t, req.ID.Destroy())
				}
				err := <-errc
				var rej *rdmacm.RejectError
				if !errors.Is(err, rdmacm.ErrAuthFailed) || !errors.As(err, &rej) || rej.Local != tc.local || rej.Reason != rdmacm.RejectConsumerDefined {
					t.Fatalf("Dial: %v (%+v), want an authentication failure (local %v)", err, rej, tc.local)
				}
				t.Logf("Dial: %v", err)
				if got := cmCounter(p.a, verbs.CMAuthFailures); got != tc.clientFail {
					t.Errorf("client cm_auth_failures %d, want %d", got, tc.clientFail)
				}
				if got := cmCounter(p.b, verbs.CMAuthFailures); got != tc.srvFails {
					t.Errorf("server cm_auth_failures %d, want %d", got, tc.srvFails)
				}
				synctest.Wait()
				if s, _ := rdmacm.StateOf(p.b); s.Conns != 0 || s.Remote != 0 || s.IDs != 1 {
					t.Errorf("server state left: %+v", s)
				}
			})
		})
	}
}

// TestPSKReplay: a captured REQ sent again by a third host is refused —
// changed (another comm ID: the MAC fails), and unchanged after its
// connection ended (the nonce was seen). After the replay window a copy
// makes a connection request again, but without the key the replayer
// cannot send a valid RTU: its forged RTU is dropped and counted, and the
// half-open connection expires after the REP's retries.
func TestPSKReplay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPair(t, false)
		defer p.close()
		in := newIntruder(t, p)
		defer in.vctx.Close()
		var mu sync.Mutex
		var reqMAD, repMAD []byte
		p.net.SetFilter(func(d transporttest.Dir, pkt []byte) transporttest.Verdict {
			mu.Lock()
			defer mu.Unlock()
			switch madAttr(pkt) {
			case cmwire.AttrREQ:
				if reqMAD == nil {
					reqMAD = append([]byte(nil), pkt[20:20+256]...)
				}
			case cmwire.AttrREP:
				repMAD = append([]byte(nil), pkt[20:20+256]...)
			}
			return transporttest.Pass
		})
		sch := pskListener(t, p, 7520, keyA)
		cch, cid := pskClient(t, p, 7520, keyA)
		must(t, cid.Connect(nil))
		req := waitEvent(t, sch, rdmacm.EventConnectRequest)
		newEnd(t, req.ID)
		must(t, req.ID.Accept(nil))
		waitEvent(t, cch, rdmacm.EventEstablished)
		waitEvent(t, sch, rdmacm.EventEstablished)
		mu.Lock()
		orig := append([]byte(nil), reqMAD...)
		mu.Unlock()
		clientID := cmwire.CommID(binary.BigEndian.Uint32(orig[24:]))

		// Into another connection: a new comm ID breaks the MAC. (Without
		// a key this REQ from a connected QP would get REJ 10 and tear the
		// connection down with a DREQ: with one, nothing happens.)
		other := bytes.Clone(orig)
		binary.BigEndian.PutUint32(other[24:], uint32(clientID)+1)
		in.send(t, "198.18.7.2", other)
		in.wantREJ(t, "REQ with another comm ID", cmwire.RejConsumerDefined, 0, clientID+1)
		if got := cmCounter(p.b, verbs.CMAuthFailures); got != 1 {
			t.Fatalf("cm_auth_failures %d after a tampered REQ, want 1", got)
		}
		// The same through a port nobody listens on: REJ 10 (the QP is
		// connected) but no DREQ, since the REQ does not prove the key.
		noPort := bytes.Clone(other)
		binary.BigEndian.PutUint64(noPort[24+8:], cmwire.ServiceID(cmwire.PSTCP, 7529))
		in.send(t, "198.18.7.2", noPort)
		in.wantREJ(t, "REQ from the connected QP to another port", cmwire.RejStaleConn, 0, clientID+1)
		synctest.Wait()
		if got := cmCounter(p.b, verbs.CMAuthFailures); got != 2 {
			t.Fatalf("cm_auth_failures %d after a forged stale REQ, want 2", got)
		}
		if st := req.ID.QP().State(); st != verbs.QPStateRTS {
			t.Fatalf("server QP %v after forged REQs, want RTS", st)
		}

		// The connection ends; past its timewait the same REQ is a replay.
		must(t, cid.Disconnect())
		waitEvent(t, sch, rdmacm.EventDisconnected)
		must(t, req.ID.Disconnect())
		waitEvent(t, cch, rdmacm.EventDisconnected)
		waitEvent(t, cch, rdmacm.EventTimewaitExit)
		waitEvent(t, sch, rdmacm.EventTimewaitExit)
		must(t, req.ID.Destroy())
		time.Sleep(5 * time.Second)
		in.send(t, "198.18.7.2", orig)
		msg := in.recv(t)
		if msg == nil || msg.Attr() != cmwire.AttrREJ || msg.REJ().Reason() != cmwire.RejConsumerDefined ||
			!bytes.HasPrefix(msg.REJ().PrivateData(), []byte("tbrdma: authentication failed: replayed request")) {
			t.Fatalf("replayed REQ answered with %v", msg)
		}
		if got := cmCounter(p.b, verbs.CMAuthFailures); got != 3 {
			t.Fatalf("cm_auth_failures %d after a replay, want 3", got)
		}
		if st, _ := rdmacm.StateOf(p.b); st.Replays != 1 || st.ReplayCache != 1 || st.AuthFailures != 3 {
			t.Fatalf("dispatcher after a replay: %+v", st)
		}

		// After the window: a connection request, a REP (to the REQ's
		// address; the attacker watches the link), a forged RTU dropped,
		// the half-open connection expires.
		time.Sleep(2*time.Minute + time.Second)
		in.send(t, "198.18.7.2", orig)
		late := waitEvent(t, sch, rdmacm.EventConnectRequest)
		newEnd(t, late.ID)
		must(t, late.ID.Accept(nil))
		synctest.Wait()
		mu.Lock()
		rep := cmwire.Message(bytes.Clone(repMAD))
		mu.Unlock()
		if rep.REP().RemoteCommID() != clientID {
			t.Fatalf("no REP to the replayed REQ")
		}
		rtu := cmwire.RTUFields{LocalCommID: clientID, RemoteCommID: rep.REP().LocalCommID()}
		in.send(t, "198.18.7.2", cmwire.AppendMAD(nil, rep.TransactionID(), rtu))
		synctest.Wait()
		if got := cmCounter(p.b, verbs.CMAuthFailures); got != 4 {
			t.Fatalf("cm_auth_failures %d after a forged RTU, want 4", got)
		}
		ev := waitLong(t, sch, rdmacm.EventUnreachable)
		if ev.ID != late.ID {
			t.Fatal("UNREACHABLE for another ID")
		}
		if got := cmCounter(p.b, verbs.CMHalfOpenExpired); got != 1 {
			t.Fatalf("cm_half_open_expired %d, want 1", got)
		}
		if got := cmCounter(p.b, verbs.CMRetries); got != 15 {
			t.Errorf("cm_retries %d, want the REP's 15", got)
		}
		must(t, late.ID.Destroy())
	})
}

// TestPSKTamperedREP: an on-path attacker changes the REP's starting PSN
// (and fixes the ICRC): the active side refuses the REP with REJ 28 and
// reports REJECTED (local authentication failure); the passive side gets
// REJECTED with the authentication error from that REJ.
func TestPSKTamperedREP(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPair(t, false)
		defer p.close()
		p.net.SetFilter(func(d transporttest.Dir, pkt []byte) transporttest.Verdict {
			if madAttr(pkt) == cmwire.AttrREP {
				pkt[20+24+22] ^= 0x01 // the starting PSN's low byte
				wire.PutICRC(pkt, d.From, d.To, 0)
			}
			return transporttest.Pass
		})
		sch := pskListener(t, p, 7530, keyA)
		cch, cid := pskClient(t, p, 7530, keyA)
		must(t, cid.Connect(nil))
		req := waitEvent(t, sch, rdmacm.EventConnectRequest)
		defer req.ID.Destroy()
		newEnd(t, req.ID)
		must(t, req.ID.Accept(nil))
		ev := waitEvent(t, cch, rdmacm.EventRejected)
		var rej *rdmacm.RejectError
		if !errors.As(ev.Err, &rej) || !rej.Auth || !rej.Local || ev.Status != 28 {
			t.Fatalf("client: %v", ev.Err)
		}
		sev := waitEvent(t, sch, rdmacm.EventRejected)
		if !errors.Is(sev.Err, rdmacm.ErrAuthFailed) {
			t.Fatalf("server: %v", sev.Err)
		}
		if got := cmCounter(p.a, verbs.CMAuthFailures); got != 1 {
			t.Errorf("client cm_auth_failures %d, want 1", got)
		}
	})
}

// TestPSKKeyErrors: short keys are refused with ErrInvalidArgument.
func TestPSKKeyErrors(t *testing.T) {
	if _, err := rdmacm.CreateEventChannel(&rdmacm.ChannelOptions{PSK: []byte("short")}); !errors.Is(err, rdmacm.ErrInvalidArgument) {
		t.Errorf("5-byte key: %v", err)
	}
	v, err := verbs.NewContext(&verbs.Options{Conn: transporttest.NewNetwork(1).Attach(netip.MustParseAddrPort("198.18.9.1:4791"))})
	must(t, err)
	defer v.Close()
	if err := rdmacm.SetDevicePSK(v, make([]byte, 15)); !errors.Is(err, rdmacm.ErrInvalidArgument) {
		t.Errorf("15-byte device key: %v", err)
	}
	must(t, rdmacm.SetDevicePSK(v, keyA))
	must(t, rdmacm.SetDevicePSK(v, nil))
}

// waitLong is waitEvent for events minutes away (in fake time).
func waitLong(t testing.TB, ch *rdmacm.EventChannel, want rdmacm.EventType) *rdmacm.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	ev, err := ch.GetEvent(ctx)
	if err != nil {
		t.Fatalf("waiting for %v: %v", want, err)
	}
	if ev.Type != want {
		t.Fatalf("got event %v (status %d, %v), want %v", ev.Type, ev.Status, ev.Err, want)
	}
	return ev
}

// TestPSKSIDR: UD service ID resolution with keys. The same key: the
// request and the reply carry the trailer and the application's private
// data arrive intact. A wrong key, or a key on one side only, end in
// UNREACHABLE with an error matching ErrAuthFailed; the side whose check
// failed counts it.
func TestPSKSIDR(t *testing.T) {
	cases := []struct {
		name           string
		client, server []byte
		ok, local      bool
		cFail, sFail   uint64
	}{
		{"same key", keyA, keyA, true, false, 0, 0},
		{"wrong key", keyA, keyB, false, false, 0, 1},
		{"client key only", keyA, nil, false, true, 1, 0},
		{"server key only", nil, keyB, false, false, 0, 1},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := newPair(t, false)
				defer p.close()
				port := uint16(7540 + i)
				sch, err := rdmacm.CreateEventChannel(&rdmacm.ChannelOptions{PSK: tc.server})
				must(t, err)
				defer sch.Destroy()
				lid, _ := sch.CreateID(p.b, rdmacm.PSUDP)
				defer lid.Destroy()
				must(t, lid.Bind(netip.AddrPortFrom(netip.IPv4Unspecified(), port)))
				must(t, lid.Listen(4))
				cch, cid := udClient(t, p.a, fmt.Sprintf("198.18.7.2:%d", port))
				defer cch.Destroy()
				defer cid.Destroy()
				if tc.client != nil {
					must(t, cid.SetPSK(tc.client))
				}
				if tc.client != nil {
					if err := cid.Connect(&rdmacm.ConnParam{PrivateData: make([]byte, 149)}); !errors.Is(err, rdmacm.ErrInvalidArgument) {
						t.Fatalf("149 bytes with a key: %v", err)
					}
				}
				must(t, cid.Connect(&rdmacm.ConnParam{PrivateData: []byte("udaddy client")}))
				if tc.server == nil || tc.ok {
					req := waitEvent(t, sch, rdmacm.EventConnectRequest)
					defer req.ID.Destroy()
					// A server without the key sees the trailer as data.
					if !bytes.HasPrefix(req.PrivateData(), append([]byte("udaddy client"), make([]byte, 180-13-32)...)) ||
						tc.server != nil && !bytes.Equal(req.PrivateData(), append([]byte("udaddy client"), make([]byte, 180-13)...)) {
						t.Fatalf("CONNECT_REQUEST private data %q", req.PrivateData())
					}
					newUDEnd(t, req.ID)
					must(t, req.ID.Accept(&rdmacm.ConnParam{PrivateData: []byte("udaddy server")}))
				}
				if tc.ok {
					est := waitEvent(t, cch, rdmacm.EventEstablished)
					if !bytes.Equal(est.PrivateData(), append([]byte("udaddy server"), make([]byte, 136-13)...)) {
						t.Fatalf("ESTABLISHED private data %q", est.PrivateData())
					}
				} else {
					ev := waitEvent(t, cch, rdmacm.EventUnreachable)
					var se *rdmacm.SIDRError
					if !errors.Is(ev.Err, rdmacm.ErrAuthFailed) || !errors.As(ev.Err, &se) || se.Local != tc.local {
						t.Fatalf("UNREACHABLE: %v, want an authentication failure (local %v)", ev.Err, tc.local)
					}
					t.Logf("%v", ev.Err)
				}
				if got := cmCounter(p.a, verbs.CMAuthFailures); got != tc.cFail {
					t.Errorf("client cm_auth_failures %d, want %d", got, tc.cFail)
				}
				if got := cmCounter(p.b, verbs.CMAuthFailures); got != tc.sFail {
					t.Errorf("server cm_auth_failures %d, want %d", got, tc.sFail)
				}
			})
		})
	}
}
