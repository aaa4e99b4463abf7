package verbs_test

// A hostile peer: raw packets, built with transport/wire, injected at a
// live responder QP over the in-memory link. Every remote WRITE, READ and
// atomic must be checked against the MR's bounds, access rights, PD and
// rkey before a byte moves; every bad input must get the response the
// specification requires (a NAK, or a silent drop) and move the counter
// named for it; and the guard bytes around every MR must never change.

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tbrdma/tbrdma/transport"
	"github.com/tbrdma/tbrdma/transport/transporttest"
	"github.com/tbrdma/tbrdma/transport/wire"
	"github.com/tbrdma/tbrdma/verbs"
	"github.com/tbrdma/tbrdma/verbs/verbstest"
)

const (
	page       = 4096
	peerQPN    = 0x3377
	victimPSN  = 0x1000
	guardByte  = 0xA5
	arenaPages = 9 // pages 1, 3, 5, 7 are MRs; 0, 2, 4, 6, 8 are guards
)

var (
	victimAddr   = netip.MustParseAddrPort("198.18.8.2:4791")
	peerAddr     = netip.MustParseAddrPort("198.18.8.1:4791")
	strangerAddr = netip.MustParseAddrPort("198.18.8.3:4791")
)

// hostileEnv is a victim context with one QP connected to a peer that the
// test plays by hand.
type hostileEnv struct {
	net      *transporttest.Network
	peer     *transporttest.Endpoint
	stranger *transporttest.Endpoint
	ctx      *verbs.Context
	qp       *verbs.QP
	arena    []byte
	rw       *verbs.MR // page 1: REMOTE_WRITE|REMOTE_READ|REMOTE_ATOMIC
	wo       *verbs.MR // page 3: REMOTE_WRITE only
	other    *verbs.MR // page 5: all rights, in another PD
	dead     *verbs.MR // page 7: registered, then deregistered

	mu  sync.Mutex
	got []wire.Packet // responses the peer received (parsed copies)
}

func newHostileEnv(t *testing.T, typ verbs.QPType, pmtu verbs.MTU) *hostileEnv {
	return newHostileEnvRecv(t, typ, pmtu, 64)
}

// newHostileEnvRecv is newHostileEnv with a first posted receive of
// recvLen bytes at the start of the read-write MR.
func newHostileEnvRecv(t *testing.T, typ verbs.QPType, pmtu verbs.MTU, recvLen int) *hostileEnv {
	e := &hostileEnv{net: transporttest.NewNetwork(77)}
	e.peer = e.net.Attach(peerAddr)
	e.stranger = e.net.Attach(strangerAddr)
	ctx, err := verbs.NewContext(&verbs.Options{Conn: e.net.Attach(victimAddr)})
	if err != nil {
		t.Fatal(err)
	}
	e.ctx = ctx
	pd, _ := ctx.AllocPD()
	pd2, _ := ctx.AllocPD()
	e.arena = bytes.Repeat([]byte{guardByte}, arenaPages*page)
	reg := func(pd *verbs.PD, pg int, acc verbs.AccessFlags) *verbs.MR {
		mr, err := pd.RegMR(e.arena[pg*page:(pg+1)*page], acc|verbs.AccessLocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		return mr
	}
	all := verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	e.rw = reg(pd, 1, all)
	e.wo = reg(pd, 3, verbs.AccessRemoteWrite)
	e.other = reg(pd2, 5, all)
	e.dead = reg(pd, 7, all)
	e.dead.Deregister()

	cq, _ := ctx.CreateCQ(64, nil)
	qp, err := pd.CreateQP(&verbs.QPInitAttr{Type: typ, SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8}})
	if err != nil {
		t.Fatal(err)
	}
	e.qp = qp
	if typ == verbs.QPTypeUD {
		mustOK(t, qp.Modify(&verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1, QKey: 0x1111},
			verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrQKey))
		mustOK(t, qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTR}, verbs.QPAttrState))
	} else {
		mustOK(t, qp.Modify(&verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1, AccessFlags: all},
			verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags))
		mask := verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN
		if typ == verbs.QPTypeRC {
			mask |= verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer
		}
		mustOK(t, qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTR, AH: verbs.AHAttr{DGID: wire.GIDFromAddr(peerAddr.Addr()), PortNum: 1},
			PathMTU: pmtu, DestQPN: peerQPN, RQPSN: victimPSN, MaxDestRdAtomic: 4, MinRNRTimer: 1}, mask))
	}
	// Posted receives let a SEND be accepted where a test needs it.
	qp.PostRecv(verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{e.rw.SGE(0, recvLen)}})
	for _, ep := range []*transporttest.Endpoint{e.peer, e.stranger} {
		go func() {
			msgs := make([]transport.Message, 8)
			for {
				n, err := ep.ReadBatch(msgs)
				if err != nil {
					return
				}
				e.mu.Lock()
				for _, m := range msgs[:n] {
					var p wire.Packet
					if p.Parse(append([]byte(nil), m.Buf...)) == nil {
						e.got = append(e.got, p)
					}
				}
				e.mu.Unlock()
			}
		}()
	}
	return e
}

func mustOK(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func (e *hostileEnv) close() {
	e.ctx.Close()
	e.net.Close()
}

// send injects one packet from ep (the peer unless a test says otherwise).
func (e *hostileEnv) send(t *testing.T, ep *transporttest.Endpoint, pkt []byte) {
	if _, err := ep.WriteBatch([]transport.Message{{Buf: pkt, Addr: victimAddr}}); err != nil {
		t.Fatalf("inject: %v", err)
	}
}

// req builds a request to the victim QP: opcode op at PSN psn.
func req(op wire.Opcode, psn verbs.PSN) wire.Headers {
	var h wire.Headers
	h.BTH = wire.BTHFields{Opcode: op, PKey: wire.PKeyDefault, DestQP: 0, PSN: psn}
	return h
}

type hostileCase struct {
	name string
	typ  verbs.QPType // default RC
	pmtu verbs.MTU    // default 1024
	// build returns the packet and the endpoint that sends it (nil: the
	// peer).
	build func(e *hostileEnv) ([]byte, *transporttest.Endpoint)
	// The response the specification requires: a NAK with this syndrome,
	// an ACK (SyndromeACK, for a duplicate), or none at all (0).
	want wire.Syndrome
	// counter is the Counters field (by its Fields name) that must move by
	// exactly one.
	counter string
	// qpErr: the fatal NAK moves the responder QP to ERR.
	qpErr bool
}

func hostileCases() []hostileCase {
	rc := func(op wire.Opcode) wire.Headers { return req(op, victimPSN) }
	payload := bytes.Repeat([]byte{0x5A}, 16)
	write := func(key verbs.RKey, va uint64, n int) func(e *hostileEnv) ([]byte, *transporttest.Endpoint) {
		return func(e *hostileEnv) ([]byte, *transporttest.Endpoint) {
			h := rc(wire.WriteOnly)
			h.RETH = wire.RETHFields{VA: va, RKey: key, DMALen: uint32(n)}
			return wire.AppendPacket(nil, &h, bytes.Repeat([]byte{0x5A}, n)), nil
		}
	}
	read := func(key func(e *hostileEnv) verbs.RKey, va func(e *hostileEnv) uint64, n uint32) func(e *hostileEnv) ([]byte, *transporttest.Endpoint) {
		return func(e *hostileEnv) ([]byte, *transporttest.Endpoint) {
			h := rc(wire.ReadRequest)
			h.RETH = wire.RETHFields{VA: va(e), RKey: key(e), DMALen: n}
			return wire.AppendPacket(nil, &h, nil), nil
		}
	}
	atomic := func(key func(e *hostileEnv) verbs.RKey, va func(e *hostileEnv) uint64) func(e *hostileEnv) ([]byte, *transporttest.Endpoint) {
		return func(e *hostileEnv) ([]byte, *transporttest.Endpoint) {
			h := rc(wire.FetchAdd)
			h.AtomicETH = wire.AtomicETHFields{VA: va(e), RKey: key(e), SwapAdd: 1}
			return wire.AppendPacket(nil, &h, nil), nil
		}
	}
	rwKey := func(e *hostileEnv) verbs.RKey { return e.rw.RKey() }
	woKey := func(e *hostileEnv) verbs.RKey { return e.wo.RKey() }
	rwVA := func(e *hostileEnv) uint64 { return e.rw.Addr() }
	woVA := func(e *hostileEnv) uint64 { return e.wo.Addr() }
	wr := func(f func(e *hostileEnv) (verbs.RKey, uint64, int)) func(e *hostileEnv) ([]byte, *transporttest.Endpoint) {
		return func(e *hostileEnv) ([]byte, *transporttest.Endpoint) {
			k, va, n := f(e)
			return write(k, va, n)(e)
		}
	}
	return []hostileCase{
		{name: "WRITE with an unknown rkey", want: wire.SyndromeRemoteAccess, counter: "naks_sent_rem_access", qpErr: true,
			build: wr(func(e *hostileEnv) (verbs.RKey, uint64, int) { return e.rw.RKey() ^ 0x5A5A0000, e.rw.Addr(), 16 })},
		{name: "WRITE with the rkey of an MR in another PD", want: wire.SyndromeRemoteAccess, counter: "naks_sent_rem_access", qpErr: true,
			build: wr(func(e *hostileEnv) (verbs.RKey, uint64, int) { return e.other.RKey(), e.other.Addr(), 16 })},
		{name: "WRITE past the end of the MR", want: wire.SyndromeRemoteAccess, counter: "naks_sent_rem_access", qpErr: true,
			build: wr(func(e *hostileEnv) (verbs.RKey, uint64, int) { return e.rw.RKey(), e.rw.Addr() + page - 8, 16 })},
		{name: "WRITE before the start of the MR", want: wire.SyndromeRemoteAccess, counter: "naks_sent_rem_access", qpErr: true,
			build: wr(func(e *hostileEnv) (verbs.RKey, uint64, int) { return e.rw.RKey(), e.rw.Addr() - 8, 16 })},
		{name: "WRITE whose address + length wraps around 2^64", want: wire.SyndromeRemoteAccess, counter: "naks_sent_rem_access", qpErr: true,
			build: wr(func(e *hostileEnv) (verbs.RKey, uint64, int) { return e.rw.RKey(), ^uint64(0) - 7, 16 })},
		{name: "WRITE to a deregistered MR", want: wire.SyndromeRemoteAccess, counter: "naks_sent_rem_access", qpErr: true,
			build: wr(func(e *hostileEnv) (verbs.RKey, uint64, int) { return e.dead.RKey(), e.dead.Addr(), 16 })},
		{name: "WRITE whose payload differs from its DMA length", want: wire.SyndromeInvalidReq, counter: "naks_sent_inv_req", qpErr: true,
			build: func(e *hostileEnv) ([]byte, *transporttest.Endpoint) {
				h := rc(wire.WriteOnly)
				h.RETH = wire.RETHFields{VA: e.rw.Addr(), RKey: e.rw.RKey(), DMALen: 8}
				return wire.AppendPacket(nil, &h, payload), nil
			}},
		{name: "oversized: WRITE payload larger than the path MTU", pmtu: verbs.MTU256, want: wire.SyndromeInvalidReq, counter: "naks_sent_inv_req", qpErr: true,
			build: wr(func(e *hostileEnv) (verbs.RKey, uint64, int) { return e.rw.RKey(), e.rw.Addr(), 512 })},
		{name: "READ of a range that overflows the MR", want: wire.SyndromeRemoteAccess, counter: "naks_sent_rem_access", qpErr: true,
			build: read(rwKey, func(e *hostileEnv) uint64 { return e.rw.Addr() + 8 }, 1<<31-1)},
		{name: "READ on an MR without REMOTE_READ", want: wire.SyndromeRemoteAccess, counter: "naks_sent_rem_access", qpErr: true,
			build: read(woKey, woVA, 64)},
		{name: "READ of a DMA length above 2^31", want: wire.SyndromeInvalidReq, counter: "naks_sent_inv_req", qpErr: true,
			build: read(rwKey, rwVA, 0xFFFFFFF0)},
		{name: "atomic on a misaligned address", want: wire.SyndromeInvalidReq, counter: "naks_sent_inv_req", qpErr: true,
			build: atomic(rwKey, func(e *hostileEnv) uint64 { return e.rw.Addr() + 4 })},
		{name: "atomic on an MR without REMOTE_ATOMIC", want: wire.SyndromeRemoteAccess, counter: "naks_sent_rem_access", qpErr: true,
			build: atomic(woKey, woVA)},
		{name: "atomic with the rkey of an MR in another PD", want: wire.SyndromeRemoteAccess, counter: "naks_sent_rem_access", qpErr: true,
			build: atomic(func(e *hostileEnv) verbs.RKey { return e.other.RKey() }, func(e *hostileEnv) uint64 { return e.other.Addr() })},
		{name: "MIDDLE packet with no message begun", want: wire.SyndromeInvalidReq, counter: "naks_sent_inv_req", qpErr: true,
			build: func(e *hostileEnv) ([]byte, *transporttest.Endpoint) {
				h := rc(wire.WriteMiddle)
				return wire.AppendPacket(nil, &h, make([]byte, 1024)), nil
			}},
		{name: "PSN far ahead of the window (2^22 ahead)", want: wire.SyndromePSNSeqError, counter: "naks_sent_seq",
			build: func(e *hostileEnv) ([]byte, *transporttest.Endpoint) {
				h := req(wire.WriteOnly, victimPSN+1<<22)
				h.RETH = wire.RETHFields{VA: e.rw.Addr(), RKey: e.rw.RKey(), DMALen: 16}
				return wire.AppendPacket(nil, &h, payload), nil
			}},
		{name: "PSN far behind (a forged duplicate WRITE) is re-ACKed, not executed", want: wire.SyndromeACK, counter: "dup_requests",
			build: func(e *hostileEnv) ([]byte, *transporttest.Endpoint) {
				h := req(wire.WriteOnly, verbs.PSN(victimPSN).Add(-1<<22))
				h.RETH = wire.RETHFields{VA: e.rw.Addr(), RKey: e.rw.RKey(), DMALen: 16}
				return wire.AppendPacket(nil, &h, payload), nil
			}},
		{name: "forged duplicate READ matching no saved request", counter: "drop_duplicate",
			build: func(e *hostileEnv) ([]byte, *transporttest.Endpoint) {
				h := req(wire.ReadRequest, verbs.PSN(victimPSN).Add(-5))
				h.RETH = wire.RETHFields{VA: e.rw.Addr(), RKey: e.rw.RKey(), DMALen: 64}
				return wire.AppendPacket(nil, &h, nil), nil
			}},
		{name: "packet for an unknown QP", counter: "drop_unknown_qp",
			build: func(e *hostileEnv) ([]byte, *transporttest.Endpoint) {
				h := rc(wire.WriteOnly)
				h.BTH.DestQP = 0xABCDE
				h.RETH = wire.RETHFields{VA: e.rw.Addr(), RKey: e.rw.RKey(), DMALen: 16}
				return wire.AppendPacket(nil, &h, payload), nil
			}},
		{name: "valid WRITE from an address that is not the QP's peer", counter: "drop_peer",
			build: func(e *hostileEnv) ([]byte, *transporttest.Endpoint) {
				p, _ := write(e.rw.RKey(), e.rw.Addr(), 16)(e)
				return p, e.stranger
			}},
		{name: "P_Key of another partition", counter: "drop_pkey",
			build: func(e *hostileEnv) ([]byte, *transporttest.Endpoint) {
				h := rc(wire.WriteOnly)
				h.BTH.PKey = 0x8001
				h.RETH = wire.RETHFields{VA: e.rw.Addr(), RKey: e.rw.RKey(), DMALen: 16}
				return wire.AppendPacket(nil, &h, payload), nil
			}},
		{name: "truncated: WRITE cut inside its RETH", counter: "drop_short",
			build: func(e *hostileEnv) ([]byte, *transporttest.Endpoint) {
				p, _ := write(e.rw.RKey(), e.rw.Addr(), 16)(e)
				return append(p[:wire.BTHSize+6:wire.BTHSize+6], 0, 0, 0, 0), nil // room for the ICRC
			}},
		{name: "bad ICRC", counter: "drop_icrc",
			build: func(e *hostileEnv) ([]byte, *transporttest.Endpoint) {
				// The link flips one bit after the ICRC is computed.
				e.net.SetDirFaults(transporttest.Dir{From: peerAddr, To: victimAddr}, transporttest.Faults{Corrupt: 1})
				p, _ := write(e.rw.RKey(), e.rw.Addr(), 16)(e)
				return p, nil
			}},
		{name: "unknown opcode (RD SEND_ONLY)", counter: "drop_opcode",
			build: func(e *hostileEnv) ([]byte, *transporttest.Endpoint) {
				b := wire.AppendPacket(nil, &wire.Headers{BTH: wire.BTHFields{Opcode: wire.SendOnly, PKey: wire.PKeyDefault, PSN: victimPSN}}, payload)
				b[0] = 0x44 // RD class
				return b, nil
			}},
		{name: "UC: READ request (no such UC opcode)", typ: verbs.QPTypeUC, counter: "drop_opcode",
			build: func(e *hostileEnv) ([]byte, *transporttest.Endpoint) {
				p, _ := read(rwKey, rwVA, 64)(e)
				p[0] = byte(wire.ClassUC | wire.ReadRequest)
				return p, nil
			}},
		{name: "UC: atomic (no such UC opcode)", typ: verbs.QPTypeUC, counter: "drop_opcode",
			build: func(e *hostileEnv) ([]byte, *transporttest.Endpoint) {
				p, _ := atomic(rwKey, rwVA)(e)
				p[0] = byte(wire.ClassUC | wire.FetchAdd)
				return p, nil
			}},
		{name: "UC: RC READ request to a UC QP", typ: verbs.QPTypeUC, counter: "drop_qp_type", build: read(rwKey, rwVA, 64)},
		{name: "UC: RC atomic to a UC QP", typ: verbs.QPTypeUC, counter: "drop_qp_type", build: atomic(rwKey, rwVA)},
		{name: "UC: WRITE past the end of the MR (UC has no NAK)", typ: verbs.QPTypeUC, counter: "drop_access", build: func(e *hostileEnv) ([]byte, *transporttest.Endpoint) {
			h := req(wire.ClassUC|wire.WriteOnly, victimPSN)
			h.RETH = wire.RETHFields{VA: e.rw.Addr() + page - 8, RKey: e.rw.RKey(), DMALen: 16}
			return wire.AppendPacket(nil, &h, payload), nil
		}},
		{name: "UC: WRITE FIRST whose message overruns the MR: nothing placed", typ: verbs.QPTypeUC, pmtu: verbs.MTU256, counter: "drop_access",
			build: func(e *hostileEnv) ([]byte, *transporttest.Endpoint) {
				h := req(wire.ClassUC|wire.WriteFirst, victimPSN)
				h.RETH = wire.RETHFields{VA: e.rw.Addr() + page - 256, RKey: e.rw.RKey(), DMALen: 512}
				return wire.AppendPacket(nil, &h, make([]byte, 256)), nil
			}},
		{name: "UD: RC WRITE to a UD QP", typ: verbs.QPTypeUD, counter: "drop_qp_type", build: write0()},
		{name: "UD: RC SEND to a UD QP", typ: verbs.QPTypeUD, counter: "drop_qp_type",
			build: func(e *hostileEnv) ([]byte, *transporttest.Endpoint) {
				h := rc(wire.SendOnly)
				return wire.AppendPacket(nil, &h, payload), nil
			}},
	}
}

// write0 is an RC WRITE to the rw MR (for the UD case, where the rkey does
// not matter).
func write0() func(e *hostileEnv) ([]byte, *transporttest.Endpoint) {
	return func(e *hostileEnv) ([]byte, *transporttest.Endpoint) {
		h := req(wire.WriteOnly, victimPSN)
		h.RETH = wire.RETHFields{VA: e.rw.Addr(), RKey: e.rw.RKey(), DMALen: 16}
		return wire.AppendPacket(nil, &h, bytes.Repeat([]byte{0x5A}, 16)), nil
	}
}

func counterValue(c verbs.Counters, name string) uint64 {
	for _, f := range c.Fields() {
		if f.Name == name {
			return f.Value
		}
	}
	panic("no counter " + name)
}

// TestHostilePeer injects each bad input at a fresh responder QP and checks
// the response, the counter and the memory.
func TestHostilePeer(t *testing.T) {
	for _, c := range hostileCases() {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				typ, pmtu := c.typ, c.pmtu
				if typ == 0 {
					typ = verbs.QPTypeRC
				}
				if pmtu == 0 {
					pmtu = verbs.MTU1024
				}
				e := newHostileEnv(t, typ, pmtu)
				defer e.close()
				target := e.qp.QPN()
				before := append([]byte(nil), e.arena...)
				c0 := e.ctx.Counters()
				pkt, from := c.build(e)
				if from == nil {
					from = e.peer
				}
				if len(pkt) > 8 && pkt[5] == 0 && pkt[6] == 0 && pkt[7] == 0 {
					pkt[5], pkt[6], pkt[7] = byte(target>>16), byte(target>>8), byte(target)
				}
				e.send(t, from, pkt)
				synctest.Wait()
				c1 := e.ctx.Counters()

				// Memory: not a byte of any MR or guard changed.
				if !bytes.Equal(before, e.arena) {
					for i := range before {
						if before[i] != e.arena[i] {
							t.Fatalf("byte %d of the arena (page %d) changed", i, i/page)
						}
					}
				}
				// Response.
				e.mu.Lock()
				got := e.got
				e.mu.Unlock()
				switch {
				case c.want == 0:
					if len(got) != 0 {
						t.Errorf("responded %v (syndrome %v), want a silent drop", got[0].BTH.Opcode(), got[0].AETH.Syndrome())
					}
				case len(got) != 1:
					t.Errorf("%d responses, want one with syndrome %v", len(got), c.want)
				case got[0].BTH.Opcode() != wire.Acknowledge || got[0].AETH.Syndrome() != c.want:
					t.Errorf("responded %v syndrome %v, want ACKNOWLEDGE syndrome %v", got[0].BTH.Opcode(), got[0].AETH.Syndrome(), c.want)
				}
				// Counter.
				if d := counterValue(c1, c.counter) - counterValue(c0, c.counter); d != 1 {
					t.Errorf("counter %s moved by %d, want 1", c.counter, d)
				}
				if d := c1.RequestsExecuted - c0.RequestsExecuted; d != 0 {
					t.Errorf("requests_executed moved by %d for a hostile request", d)
				}
				// State: a fatal NAK ends the connection; anything else
				// leaves it as it was.
				want := verbs.QPStateRTR
				if c.qpErr {
					want = verbs.QPStateErr
				}
				if st := e.qp.State(); st != want {
					t.Errorf("QP state %v, want %v", st, want)
				}
				t.Log(fmt.Sprintf("%s: %d response(s); counters moved: %s", c.name, len(got), movedCounters(c0, c1)))
			})
		})
	}
}

// movedCounters lists the counters that differ between two snapshots.
func movedCounters(a, b verbs.Counters) string {
	fa, fb := a.Fields(), b.Fields()
	s := ""
	for i := range fa {
		if fb[i].Value != fa[i].Value && fa[i].Name != "packets_in" && fa[i].Name != "packets_out" &&
			fa[i].Name != "bytes_in" && fa[i].Name != "bytes_out" {
			s += fmt.Sprintf(" %s+%d", fa[i].Name, fb[i].Value-fa[i].Value)
		}
	}
	return s
}

// TestUDPDropsCounted: what the UDP endpoint refuses before the engine
// sees a packet — a datagram too short for a BTH and an ICRC, one whose
// ICRC is wrong, one larger than the largest packet — shows in the
// context's counters by reason. (The oversized one counts as "oversize"
// where the endpoint reads without GRO and so truncates it; with GRO the
// endpoint reads datagrams up to 64 KiB and the ICRC check refuses it.)
func TestUDPDropsCounted(t *testing.T) {
	ctx, err := verbs.NewContext(&verbs.Options{Addr: verbstest.LoopbackAddr()})
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(ctx.LocalAddr()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	h := req(wire.WriteOnly, 1)
	h.BTH.DestQP = 0x123
	h.RETH = wire.RETHFields{DMALen: 4}
	badICRC := wire.AppendPacket(nil, &h, []byte{1, 2, 3, 4}) // ICRC left 0
	for _, b := range [][]byte{make([]byte, 10), badICRC, make([]byte, 10000)} {
		if _, err := c.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		d := ctx.Counters().Drops
		if d[verbs.DropShort] == 1 && d[verbs.DropICRC] >= 1 && d[verbs.DropICRC]+d[verbs.DropOversize] == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("drops %v, want short 1 and icrc + oversize 2", d)
		}
	}
}
