package verbs

// Replay conformance against rdma_rxe's own packets (testdata/rxe).
//
// Every capture holds one connection between two rxe QPs: the client on
// 198.18.0.2 and the server on 198.18.0.3. Each capture is replayed twice,
// once with a tbrdma context in each role:
//
//   - as the server ("responder replay"): the client's packets are fed to
//     tbrdma one by one and tbrdma's answers must be rxe's answers;
//   - as the client ("requester replay"): tbrdma posts the work requests the
//     client application posted, its request packets must be rxe's, and the
//     server's captured answers, fed back, must complete those requests with
//     the data the capture carries.
//
// In the ping-pong captures (send_lat, write_lat, ud_pingpong,
// rc_pingpong) both sides send, so each role is requester and responder at
// once; the replay is the same.
//
// The tbrdma QP gets the captured QPN, PSNs and path MTU, and its memory
// region the captured R_Key and virtual address (from the tools' out-of-band
// TCP exchange in the same pcap), so that the packets can be compared as
// they are. The memory holds what rxe's memory held: READ targets the
// bytes the captured READ responses carry, atomic targets the original
// value of the first captured ATOMIC_ACKNOWLEDGE, send buffers the
// captured payloads.
//
// What is compared, for every packet our role sent in the capture:
// count and order; every BTH field (opcode, SE, MigReq, PadCnt, TVer,
// P_Key, FECN/BECN/reserved, DestQP, AckReq, PSN); DETH, RETH, AtomicETH,
// AETH (syndrome and MSN), AtomicAckETH, ImmDt, IETH; payload and pad; and
// finally the packet bytes as a whole (everything up to the ICRC), plus the
// destination address and UDP port. Then the completions (status, opcode,
// byte_len, data; for UD receives also the GRH area, which must hold the
// captured IPv4 header as rxe delivers it), the memory the peer wrote to or
// did atomics on, and the engine's drop/NAK/retransmit counters (all zero:
// the captures are clean).
//
// Not compared, because they are not deterministic or not ours:
//   - the ICRC trailer, the IPv4 header of the packets we send (rxe's IP IDs
//     are random) and the UDP source port (rxe hashes the QPN; tbrdma uses
//     its socket's port): the transport owns them and the fake connection
//     below has no IP header;
//   - the interleaving of the two directions. rxe's requester and responder
//     run in kernel tasks, and what the bridge saw first depends on timing
//     (write_bw_64k shows all 80 WRITE packets before the first ACK, which
//     answers the 16th). The replay feeds the peer's packets in
//     capture order and compares each direction's sequence on its own.
//     Where our role starts a message (the application posts a work
//     request), the replay posts it when the capture shows its first packet.
//   - the ACK timeout: it does not appear on the wire. ibv_rc_pingpong uses 14
//     (67 ms); the replay uses perftest's 20 (4.3 s) for every RC QP so that
//     a slow test machine cannot fire a retransmission.
//
// rxe acknowledges every packet that has AckReq set, with no coalescing,
// and so does tbrdma: the ACK streams are compared one for one. No
// capture needed a tolerance; if tbrdma ever coalesces ACKs this is the
// place to relax the comparison (only the last ACK of a burst, cumulative
// PSN and MSN, must then match).
//
// Packets to QP1 (connection management MADs) are skipped; none of the
// captures replayed here has any.

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/tbrdma/tbrdma/transport"
	"github.com/tbrdma/tbrdma/transport/sniff"
	"github.com/tbrdma/tbrdma/transport/wire"
)

var (
	replayClientIP = netip.MustParseAddr("198.18.0.2")
	replayServerIP = netip.MustParseAddr("198.18.0.3")
)

// msgSpec is one work request an application posted: what the tool's
// command line asks for (see testdata/rxe/MANIFEST.md).
type msgSpec struct {
	op         WROpcode
	size       int
	compareAdd uint64
	swap       uint64
}

func repeat(n int, m msgSpec) []msgSpec {
	s := make([]msgSpec, n)
	for i := range s {
		s[i] = m
	}
	return s
}

// replayScenario describes one capture: the QP type and attributes the
// tools used, and the work requests each side posted, in order.
type replayScenario struct {
	name    string
	typ     QPType
	pathMTU MTU
	// access is the QP's qp_access_flags as the tool sets them.
	access AccessFlags
	// rdAtomic is max_rd_atomic and max_dest_rd_atomic; 0 means the OUT
	// value perftest exchanged.
	rdAtomic uint8
	qkey     QKey
	client   []msgSpec
	server   []msgSpec
}

// perftest's QPs allow remote writes and reads (and atomics for
// ib_atomic_*); ibv_*_pingpong's allow nothing remote.
const perftestAccess = AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic

// perftestQKey and pingpongQKey are the Q_Keys perftest (DEF_QKEY) and
// ibv_ud_pingpong use.
const (
	perftestQKey = 0x11111111
	pingpongQKey = 0x11111111
)

var replayScenarios = []replayScenario{
	{name: "write_bw_4k", typ: QPTypeRC, pathMTU: MTU4096, access: perftestAccess,
		client: repeat(5, msgSpec{op: WRRDMAWrite, size: 4096})},
	{name: "write_bw_64k", typ: QPTypeRC, pathMTU: MTU4096, access: perftestAccess,
		client: repeat(5, msgSpec{op: WRRDMAWrite, size: 65536})},
	// ib_write_lat: each side writes into the other's buffer in turn (not
	// in the list, but an rxe capture of the same kind).
	{name: "write_lat", typ: QPTypeRC, pathMTU: MTU4096, access: perftestAccess,
		client: repeat(20, msgSpec{op: WRRDMAWrite, size: 32}),
		server: repeat(20, msgSpec{op: WRRDMAWrite, size: 32})},
	{name: "read_lat", typ: QPTypeRC, pathMTU: MTU4096, access: perftestAccess,
		client: repeat(20, msgSpec{op: WRRDMARead, size: 64})},
	{name: "read_bw", typ: QPTypeRC, pathMTU: MTU4096, access: perftestAccess,
		client: repeat(5, msgSpec{op: WRRDMARead, size: 65536})},
	// ib_send_lat's default size is 2 bytes; both sides send.
	{name: "send_lat", typ: QPTypeRC, pathMTU: MTU4096, access: perftestAccess,
		client: repeat(20, msgSpec{op: WRSend, size: 2}),
		server: repeat(20, msgSpec{op: WRSend, size: 2})},
	{name: "send_bw_64k", typ: QPTypeRC, pathMTU: MTU4096, access: perftestAccess,
		client: repeat(5, msgSpec{op: WRSend, size: 65536})},
	// ib_atomic_lat adds 1, and compares with 0 and swaps in 0.
	{name: "atomic_fetch_add", typ: QPTypeRC, pathMTU: MTU4096, access: perftestAccess,
		client: repeat(20, msgSpec{op: WRAtomicFetchAndAdd, size: 8, compareAdd: 1})},
	{name: "atomic_cmp_swap", typ: QPTypeRC, pathMTU: MTU4096, access: perftestAccess,
		client: repeat(20, msgSpec{op: WRAtomicCmpAndSwp, size: 8, compareAdd: 0, swap: 0})},
	{name: "write_bw_uc", typ: QPTypeUC, pathMTU: MTU4096, access: AccessLocalWrite | AccessRemoteWrite,
		client: repeat(5, msgSpec{op: WRRDMAWrite, size: 65536})},
	{name: "send_bw_ud", typ: QPTypeUD, qkey: perftestQKey,
		client: repeat(5, msgSpec{op: WRSend, size: 2048})},
	{name: "ud_pingpong", typ: QPTypeUD, qkey: pingpongQKey,
		client: repeat(5, msgSpec{op: WRSend, size: 1024}),
		server: repeat(5, msgSpec{op: WRSend, size: 1024})},
	// ibv_rc_pingpong: path MTU 1024 (its -m default), max_rd_atomic and
	// max_dest_rd_atomic 1, qp_access_flags 0.
	{name: "rc_pingpong", typ: QPTypeRC, pathMTU: MTU1024, access: 0, rdAtomic: 1,
		client: repeat(5, msgSpec{op: WRSend, size: 4096}),
		server: repeat(5, msgSpec{op: WRSend, size: 4096})},
}

func TestReplayRXE(t *testing.T) {
	for i := range replayScenarios {
		sc := &replayScenarios[i]
		t.Run(sc.name, func(t *testing.T) {
			cp := loadCapture(t, sc.name)
			t.Run("responder", func(t *testing.T) { replay(t, cp, sc, false) })
			t.Run("requester", func(t *testing.T) { replay(t, cp, sc, true) })
		})
	}
}

// --- the capture ----------------------------------------------------------------

// capPkt is one RoCEv2 packet of a capture.
type capPkt struct {
	frame      int // pcap record number, from 1 as tshark counts
	fromClient bool
	src, dst   netip.AddrPort
	ipHdr      []byte
	ipID       uint16
	raw        []byte // the UDP payload: BTH through ICRC
	pkt        wire.Packet
}

// qpInfo is what one side announced in the out-of-band TCP exchange.
type qpInfo struct {
	qpn      QPN
	psn      PSN
	rkey     RKey
	va       uint64
	outReads int // perftest only
	gid      GID
}

type capture struct {
	name           string
	pkts           []capPkt
	client, server qpInfo
}

func loadCapture(t *testing.T, name string) *capture {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "testdata", "rxe", name+".pcap"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := sniff.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	cp := &capture{name: name}
	var haveClient, haveServer bool
	for frame := 1; ; frame++ {
		rec, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s: frame %d: %v", name, frame, err)
		}
		if ip, _, payload, src, dst, ok := sniff.DecodeUDP(r.LinkType(), rec.Data); ok {
			if dst.Port() != wire.UDPPort {
				continue
			}
			p := capPkt{frame: frame, src: src, dst: dst, ipHdr: bytes.Clone(ip), raw: bytes.Clone(payload)}
			if len(ip) >= 20 && ip[0]>>4 == 4 {
				p.ipID = binary.BigEndian.Uint16(ip[4:])
			}
			if err := p.pkt.Parse(p.raw); err != nil {
				t.Fatalf("%s: frame %d: %v", name, frame, err)
			}
			if p.pkt.BTH.DestQP() == wire.QPNGSI {
				continue // connection management: a later issue
			}
			switch {
			case src.Addr() == replayClientIP && dst.Addr() == replayServerIP:
				p.fromClient = true
			case src.Addr() == replayServerIP && dst.Addr() == replayClientIP:
			default:
				t.Fatalf("%s: frame %d: RoCE packet %v -> %v is not between client and server", name, frame, src, dst)
			}
			cp.pkts = append(cp.pkts, p)
			continue
		}
		src, payload, ok := decodeTCP(r.LinkType(), rec.Data)
		if !ok || len(payload) == 0 {
			continue
		}
		info, ok := parseQPRecord(payload)
		if !ok || src != replayClientIP && src != replayServerIP {
			continue
		}
		if info.gid.Addr() != src {
			t.Fatalf("%s: frame %d: %v announces GID %v", name, frame, src, info.gid)
		}
		// The tools send their record several times; it must not change.
		side, have := &cp.client, &haveClient
		if src == replayServerIP {
			side, have = &cp.server, &haveServer
		}
		if *have && info != *side {
			t.Fatalf("%s: frame %d: %v announces %+v, earlier %+v", name, frame, src, info, *side)
		}
		*side, *have = info, true
	}
	if !haveClient || !haveServer {
		t.Fatalf("%s: no QP records in the TCP exchange (client %v, server %v)", name, haveClient, haveServer)
	}
	if len(cp.pkts) == 0 {
		t.Fatalf("%s: no RoCE packets", name)
	}
	// The packets must be addressed as announced.
	for i := range cp.pkts {
		p := &cp.pkts[i]
		to, from := cp.server, cp.client
		if !p.fromClient {
			to, from = from, to
		}
		if p.pkt.BTH.DestQP() != to.qpn {
			t.Fatalf("%s: frame %d: DestQP %v, the peer announced %v", name, p.frame, p.pkt.BTH.DestQP(), to.qpn)
		}
		if p.pkt.DETH != nil && p.pkt.DETH.SrcQP() != from.qpn {
			t.Fatalf("%s: frame %d: DETH SrcQP %v, the sender announced %v", name, p.frame, p.pkt.DETH.SrcQP(), from.qpn)
		}
	}
	return cp
}

// decodeTCP returns the source address and payload of an IPv4 TCP segment
// in an Ethernet frame.
func decodeTCP(linktype int, frame []byte) (netip.Addr, []byte, bool) {
	if linktype != sniff.LinkTypeEthernet || len(frame) < 14+20 || binary.BigEndian.Uint16(frame[12:]) != 0x0800 {
		return netip.Addr{}, nil, false
	}
	ip := frame[14:]
	ihl := int(ip[0]&0x0F) * 4
	total := int(binary.BigEndian.Uint16(ip[2:]))
	if ip[0]>>4 != 4 || ip[9] != 6 || ihl < 20 || total < ihl+20 || total > len(ip) {
		return netip.Addr{}, nil, false
	}
	tcp := ip[ihl:total]
	off := int(tcp[12]>>4) * 4
	if off < 20 || off > len(tcp) {
		return netip.Addr{}, nil, false
	}
	return netip.AddrFrom4([4]byte(ip[12:16])), tcp[off:], true
}

// parseQPRecord parses the QP record perftest 4.5 sends
// ("LID:OUT:QPN:PSN:RKEY:VADDR:GID as 16 bytes:SRQN:") or ibv_*_pingpong
// sends ("LID:QPN:PSN:GID as 32 hex digits").
func parseQPRecord(b []byte) (qpInfo, bool) {
	s := strings.TrimRight(string(b), "\x00")
	f := strings.Split(s, ":")
	hexu := func(s string, n int) (uint64, bool) {
		if len(s) != n {
			return 0, false
		}
		v, err := strconv.ParseUint(s, 16, 64)
		return v, err == nil
	}
	var info qpInfo
	switch {
	case len(f) >= 6+16 && len(f[1]) == 4: // perftest
		out, ok1 := hexu(f[1], 4)
		qpn, ok2 := hexu(f[2], 6)
		psn, ok3 := hexu(f[3], 6)
		rkey, ok4 := hexu(f[4], 8)
		va, ok5 := hexu(f[5], 16)
		if !(ok1 && ok2 && ok3 && ok4 && ok5) {
			return qpInfo{}, false
		}
		for i := range 16 {
			v, ok := hexu(f[6+i], 2)
			if !ok {
				return qpInfo{}, false
			}
			info.gid[i] = byte(v)
		}
		info.outReads, info.qpn, info.psn, info.rkey, info.va = int(out), QPN(qpn), PSN(psn), RKey(rkey), va
	case len(f) == 4 && len(f[1]) == 6: // ibv_rc_pingpong, ibv_ud_pingpong
		qpn, ok1 := hexu(f[1], 6)
		psn, ok2 := hexu(f[2], 6)
		g, err := hex.DecodeString(f[3])
		if !ok1 || !ok2 || err != nil || len(g) != 16 {
			return qpInfo{}, false
		}
		info.qpn, info.psn, info.gid = QPN(qpn), PSN(psn), GID(g)
	default:
		return qpInfo{}, false
	}
	return info, true
}

// capMsg is one message one side sent, with what the capture shows of it.
type capMsg struct {
	first  int // index in capture.pkts of its first packet
	op     wire.Opcode
	psn    PSN
	npkts  int
	reth   wire.RETHFields
	atomic wire.AtomicETHFields
	data   []byte // SEND/WRITE: the payload of all its packets
	resp   []byte // READ: the data of its responses
	orig   uint64 // atomic: the original value its ATOMIC_ACKNOWLEDGE returned
	answer bool   // atomic: an ATOMIC_ACKNOWLEDGE was seen
	ipHdr  []byte // UD: the IP header it travelled in
}

func (m *capMsg) wrOpcode() WROpcode {
	op := m.op
	switch {
	case op.Has(wire.IsSend) && op.Has(wire.HasImmDt):
		return WRSendWithImm
	case op.Has(wire.IsSend) && op.Has(wire.HasIETH):
		return WRSendWithInv
	case op.Has(wire.IsSend):
		return WRSend
	case op.Has(wire.IsWrite) && op.Has(wire.HasImmDt):
		return WRRDMAWriteWithImm
	case op.Has(wire.IsWrite):
		return WRRDMAWrite
	case op == wire.ReadRequest:
		return WRRDMARead
	case op == wire.CompareSwap:
		return WRAtomicCmpAndSwp
	case op == wire.FetchAdd:
		return WRAtomicFetchAndAdd
	}
	return 0xFF
}

func startsMessage(op wire.Opcode) bool {
	return op.Has(wire.IsRequest) && (op.Has(wire.IsFirst) || op.Has(wire.IsOnly))
}

// messages returns the messages the client (or the server) sent, in order,
// with the data of the READ responses and atomic ACKs the other side
// returned for them.
func (cp *capture) messages(t *testing.T, fromClient bool, pmtu int) []capMsg {
	t.Helper()
	var msgs []capMsg
	cur := -1
	for i := range cp.pkts {
		p := &cp.pkts[i]
		op := p.pkt.Opcode()
		psn := p.pkt.BTH.PSN()
		if p.fromClient == fromClient {
			if !op.Has(wire.IsRequest) {
				continue
			}
			if startsMessage(op) {
				m := capMsg{first: i, op: op, psn: psn, npkts: 1, ipHdr: p.ipHdr}
				if p.pkt.RETH != nil {
					m.reth = p.pkt.RETH.Fields()
				}
				if p.pkt.AtomicETH != nil {
					m.atomic = p.pkt.AtomicETH.Fields()
				}
				if op == wire.ReadRequest {
					m.npkts = npkts(m.reth.DMALen, pmtu)
				}
				m.data = append(m.data, p.pkt.Payload...)
				msgs = append(msgs, m)
				cur = len(msgs) - 1
				continue
			}
			if cur < 0 || msgs[cur].psn.Add(msgs[cur].npkts) != psn {
				t.Fatalf("%s: frame %d: %v PSN %v does not continue a message", cp.name, p.frame, op, psn)
			}
			msgs[cur].npkts++
			msgs[cur].data = append(msgs[cur].data, p.pkt.Payload...)
			continue
		}
		// A response from the other side.
		switch {
		case op.Has(wire.IsRead) && !op.Has(wire.IsRequest):
			m := findMsg(msgs, psn, wire.ReadRequest)
			if m == nil {
				t.Fatalf("%s: frame %d: %v PSN %v answers no READ", cp.name, p.frame, op, psn)
			}
			if int(psn.Diff(m.psn))*pmtu != len(m.resp) {
				t.Fatalf("%s: frame %d: READ response PSN %v out of order", cp.name, p.frame, psn)
			}
			m.resp = append(m.resp, p.pkt.Payload...)
		case op == wire.AtomicAcknowledge:
			m := findMsg(msgs, psn, 0)
			if m == nil || !m.op.IsAtomic() {
				t.Fatalf("%s: frame %d: ATOMIC_ACKNOWLEDGE PSN %v answers no atomic", cp.name, p.frame, psn)
			}
			m.orig, m.answer = p.pkt.AtomicAckETH.Orig(), true
		}
	}
	return msgs
}

func findMsg(msgs []capMsg, psn PSN, op wire.Opcode) *capMsg {
	for i := range msgs {
		m := &msgs[i]
		if (op == 0 || m.op == op) && psn.Diff(m.psn) >= 0 && psn.Diff(m.psn) < int32(m.npkts) {
			return m
		}
	}
	return nil
}

// --- a transport.Conn for replays ---------------------------------------------

// replayConn is a transport.Conn driven by the test: inject hands the
// context's receive loop one packet and returns once the loop has handled
// it and sent whatever it answered; WriteBatch records what the engine
// sends.
type replayConn struct {
	local  netip.AddrPort
	in     chan transport.Message
	done   chan struct{}
	closed chan struct{}
	once   sync.Once
	held   bool // the receive loop is handling a packet (receive goroutine only)

	mu   sync.Mutex
	sent []sentPkt
}

type sentPkt struct {
	buf []byte
	dst netip.AddrPort
}

func newReplayConn(local netip.AddrPort) *replayConn {
	return &replayConn{local: local, in: make(chan transport.Message), done: make(chan struct{}), closed: make(chan struct{})}
}

func (c *replayConn) ReadBatch(msgs []transport.Message) (int, error) {
	if c.held {
		// The loop calls ReadBatch again only after handling the previous
		// packet and flushing its answers.
		c.held = false
		select {
		case c.done <- struct{}{}:
		case <-c.closed:
			return 0, net.ErrClosed
		}
	}
	select {
	case m := <-c.in:
		msgs[0] = m
		c.held = true
		return 1, nil
	case <-c.closed:
		return 0, net.ErrClosed
	}
}

func (c *replayConn) inject(m transport.Message) {
	c.in <- m
	<-c.done
}

func (c *replayConn) WriteBatch(msgs []transport.Message) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range msgs {
		// The engine reuses its buffers; the ICRC trailer is the real
		// transport's business and is left as the engine wrote it.
		c.sent = append(c.sent, sentPkt{buf: bytes.Clone(m.Buf), dst: m.Addr})
	}
	return len(msgs), nil
}

func (c *replayConn) packets() []sentPkt {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]sentPkt(nil), c.sent...)
}

func (c *replayConn) BatchSize() int             { return 1 }
func (c *replayConn) LocalAddr() netip.AddrPort  { return c.local }
func (c *replayConn) Stats() (s transport.Stats) { return s }
func (c *replayConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return nil
}

// --- the replay -----------------------------------------------------------------

// replay runs one capture with tbrdma in the client's role (asClient) or
// the server's.
func replay(t *testing.T, cp *capture, sc *replayScenario, asClient bool) {
	me, peer := cp.server, cp.client
	myIP, peerIP := replayServerIP, replayClientIP
	mySpecs, peerSpecs := sc.server, sc.client
	if asClient {
		me, peer = peer, me
		myIP, peerIP = peerIP, myIP
		mySpecs, peerSpecs = peerSpecs, mySpecs
	}
	pmtu := sc.pathMTU.Bytes()
	if sc.typ == QPTypeUD {
		pmtu = MTU4096.Bytes() // the port's active MTU
	}
	mine := cp.messages(t, asClient, pmtu)
	theirs := cp.messages(t, !asClient, pmtu)
	checkSpecs(t, "ours", mine, mySpecs)
	checkSpecs(t, "the peer's", theirs, peerSpecs)

	conn := newReplayConn(netip.AddrPortFrom(myIP, wire.UDPPort))
	ctx, err := NewContext(&Options{Conn: conn, ActiveMTU: MTU4096})
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	pd, _ := ctx.AllocPD()
	sendCQ, _ := ctx.CreateCQ(256, nil)
	recvCQ, _ := ctx.CreateCQ(256, nil)
	qp, err := pd.createQPNumbered(&QPInitAttr{Type: sc.typ, SendCQ: sendCQ, RecvCQ: recvCQ,
		Cap: QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}}, me.qpn)
	if err != nil {
		t.Fatal(err)
	}

	// Local memory: one slot per message we send (its data, or where READ
	// data and atomic results land) and one per SEND we receive.
	recvExtra := 0
	if sc.typ == QPTypeUD {
		recvExtra = 40 // the GRH area
	}
	var theirSends []*capMsg
	for i := range theirs {
		if theirs[i].op.Has(wire.IsSend) {
			theirSends = append(theirSends, &theirs[i])
		}
	}
	slot := func(n int) int { return (max(n, 8) + 63) &^ 63 }
	myOff := make([]int, len(mine))
	recvOff := make([]int, len(theirSends))
	size := 0
	for k := range mine {
		myOff[k] = size
		size += slot(mySpecs[k].size)
	}
	recvSize := 0
	for _, s := range peerSpecs {
		if s.op == WRSend || s.op == WRSendWithImm {
			recvSize = max(recvSize, s.size+recvExtra)
		}
	}
	for j := range theirSends {
		recvOff[j] = size
		size += slot(recvSize)
	}
	local := make([]byte, max(size, 64))
	for k := range mine {
		copy(local[myOff[k]:], mine[k].data)
	}
	localMR, err := pd.RegMR(local, AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}

	// The MR the peer's WRITEs, READs and atomics name, holding what rxe's
	// held; model is what it must hold when the replay ends.
	target, model := setupTarget(t, cp, pd, me, theirs)

	rdAtomic := sc.rdAtomic
	if rdAtomic == 0 {
		rdAtomic = uint8(min(me.outReads, MaxRdAtomic))
	}
	connectReplayQP(t, qp, sc, me, peer, peerIP, rdAtomic)

	for j := range theirSends {
		if _, err := qp.PostRecv(RecvWR{WRID: uint64(1000 + j), SGList: []SGE{localMR.SGE(recvOff[j], recvSize)}}); err != nil {
			t.Fatal(err)
		}
	}
	var ah *AH
	if sc.typ == QPTypeUD {
		ah, err = pd.CreateAH(AHAttr{DGID: wire.GIDFromAddr(peerIP), PortNum: 1, HopLimit: 64})
		if err != nil {
			t.Fatal(err)
		}
	}

	// Walk the capture: the peer's packets go in, ours are what we must
	// send; a message of ours is posted where its first packet shows.
	var want []*capPkt
	next, injected := 0, 0
	for i := range cp.pkts {
		p := &cp.pkts[i]
		if p.fromClient != asClient {
			conn.inject(transport.Message{Buf: bytes.Clone(p.raw), Addr: p.src, Local: p.dst.Addr(), IPID: p.ipID})
			injected++
			continue
		}
		if startsMessage(p.pkt.Opcode()) {
			k := next
			next++
			s := mySpecs[k]
			wr := SendWR{WRID: uint64(k), Opcode: s.op, Flags: SendSignaled,
				SGList: []SGE{localMR.SGE(myOff[k], s.size)}, CompareAdd: s.compareAdd, Swap: s.swap}
			switch {
			case sc.typ == QPTypeUD:
				wr.AH, wr.RemoteQPN, wr.RemoteQKey = ah, peer.qpn, sc.qkey
			case s.op != WRSend && s.op != WRSendWithImm:
				// perftest aims at the start of the peer's buffer.
				wr.RemoteAddr, wr.RKey = peer.va, peer.rkey
			}
			if _, err := qp.PostSend(wr); err != nil {
				t.Fatalf("frame %d: post %v: %v", p.frame, s.op, err)
			}
		}
		want = append(want, p)
	}

	comparePackets(t, conn.packets(), want, netip.AddrPortFrom(peerIP, wire.UDPPort))

	// Completions of our work requests.
	wcs := pollAll(t, sendCQ, len(mine)+1)
	if len(wcs) != len(mine) {
		t.Errorf("%d send completions, want %d", len(wcs), len(mine))
	}
	for k := range min(len(wcs), len(mine)) {
		wc, s, m := wcs[k], mySpecs[k], &mine[k]
		wantLen := uint32(s.size)
		if s.op.isAtomic() {
			wantLen = 8
		}
		if wc.WRID != uint64(k) || wc.Status != WCSuccess || wc.Opcode != wcOpcodeFor(s.op) || wc.ByteLen != wantLen || wc.QPN != me.qpn {
			t.Errorf("send completion %d: %+v; want WRID %d, %v, %v, byte_len %d", k, wc, k, WCSuccess, wcOpcodeFor(s.op), wantLen)
		}
		got := local[myOff[k] : myOff[k]+s.size]
		switch {
		case s.op == WRRDMARead && !bytes.Equal(got, m.resp):
			t.Errorf("READ %d (frame %d): the data read differs from the captured responses", k, cp.pkts[m.first].frame)
		case s.op.isAtomic() && binary.NativeEndian.Uint64(got) != m.orig:
			t.Errorf("atomic %d (frame %d): returned %#x, rxe returned %#x", k, cp.pkts[m.first].frame, binary.NativeEndian.Uint64(got), m.orig)
		}
	}

	// Completions of the peer's SENDs.
	rwcs := pollAll(t, recvCQ, len(theirSends)+1)
	if len(rwcs) != len(theirSends) {
		t.Errorf("%d receive completions, want %d", len(rwcs), len(theirSends))
	}
	for j := range min(len(rwcs), len(theirSends)) {
		wc, m := rwcs[j], theirSends[j]
		wantLen := uint32(len(m.data) + recvExtra)
		if wc.WRID != uint64(1000+j) || wc.Status != WCSuccess || wc.Opcode != WCRecv || wc.ByteLen != wantLen {
			t.Errorf("receive completion %d: %+v; want WRID %d, success, RECV, byte_len %d", j, wc, 1000+j, wantLen)
			continue
		}
		buf := local[recvOff[j]:]
		if !bytes.Equal(buf[recvExtra:recvExtra+len(m.data)], m.data) {
			t.Errorf("receive %d (frame %d): the data received differs from the capture", j, cp.pkts[m.first].frame)
		}
		if sc.typ == QPTypeUD {
			// rxe puts the IPv4 header of the datagram in bytes 20..39.
			if wc.SrcQP != peer.qpn || wc.Flags&WCFlagGRH == 0 {
				t.Errorf("receive %d: src_qp %v flags %#x; want %v with GRH", j, wc.SrcQP, wc.Flags, peer.qpn)
			}
			if !bytes.Equal(buf[20:40], m.ipHdr) || !bytes.Equal(buf[:20], make([]byte, 20)) {
				t.Errorf("receive %d (frame %d): GRH area\n  ours %x\n  rxe  %x (IPv4 header in bytes 20..39)",
					j, cp.pkts[m.first].frame, buf[:40], append(make([]byte, 20), m.ipHdr...))
			}
		}
	}

	// What the peer's WRITEs and atomics left in our memory.
	if target != nil && !bytes.Equal(target, model) {
		for i := range target {
			if target[i] != model[i] {
				t.Errorf("target memory differs from the model from offset %d: ours %x, want %x", i,
					target[i:min(i+16, len(target))], model[i:min(i+16, len(model))])
				break
			}
		}
	}

	if st := qp.State(); st != QPStateRTS {
		t.Errorf("QP state %v after the replay, want RTS", st)
	}
	cnt := ctx.Counters()
	if got := cnt.PacketsIn; got != uint64(injected) {
		t.Errorf("context counted %d received packets, %d were injected", got, injected)
	}
	for _, c := range cnt.Fields() {
		switch c.Name {
		case "packets_in", "packets_out", "bytes_in", "bytes_out", "requests_executed":
			continue // traffic, not trouble
		}
		if c.Value != 0 {
			t.Errorf("counter %s = %d, want 0", c.Name, c.Value)
		}
	}
}

// checkSpecs checks that the work requests a scenario lists are the ones the
// capture shows.
func checkSpecs(t *testing.T, whose string, msgs []capMsg, specs []msgSpec) {
	t.Helper()
	if len(msgs) != len(specs) {
		t.Fatalf("the capture has %d messages of %s, the scenario %d", len(msgs), whose, len(specs))
	}
	for k := range msgs {
		m, s := &msgs[k], specs[k]
		size := len(m.data)
		switch {
		case m.op == wire.ReadRequest:
			size = int(m.reth.DMALen)
		case m.op.IsAtomic():
			size = 8
		}
		if m.wrOpcode() != s.op || size != s.size {
			t.Fatalf("message %d of %s: the capture shows %v of %d bytes, the scenario %v of %d", k, whose, m.op, size, s.op, s.size)
		}
		switch {
		case m.op == wire.FetchAdd && m.atomic.SwapAdd != s.compareAdd,
			m.op == wire.CompareSwap && (m.atomic.SwapAdd != s.swap || m.atomic.Compare != s.compareAdd):
			t.Fatalf("message %d of %s: AtomicETH %+v does not match the scenario %+v", k, whose, m.atomic, s)
		}
		if m.op == wire.ReadRequest && len(m.resp) != s.size || m.op.IsAtomic() && !m.answer {
			t.Fatalf("message %d of %s: the capture lacks its responses", k, whose)
		}
	}
}

// setupTarget registers the memory region the peer's RDMA requests name,
// with the announced key and address, and fills it as rxe's was: READ
// targets with the captured response data, atomic targets with the first
// captured original value. It returns the region's buffer and a model of
// what the buffer must hold after the peer's requests.
func setupTarget(t *testing.T, cp *capture, pd *PD, me qpInfo, theirs []capMsg) (buf, model []byte) {
	t.Helper()
	end := uint64(0)
	for i := range theirs {
		m := &theirs[i]
		va, n, key := m.reth.VA, uint64(m.reth.DMALen), m.reth.RKey
		switch {
		case m.op.IsAtomic():
			va, n, key = m.atomic.VA, 8, m.atomic.RKey
		case !m.op.Has(wire.HasRETH):
			continue
		}
		if key != me.rkey || va < me.va {
			t.Fatalf("frame %d: %v names key %v address %#x; the region announced is %v at %#x",
				cp.pkts[m.first].frame, m.op, key, va, me.rkey, me.va)
		}
		end = max(end, va-me.va+n)
	}
	if end == 0 {
		return nil, nil
	}
	buf = make([]byte, (end+4095)&^4095)
	known := make([]bool, len(buf))
	fill := func(off uint64, b []byte, frame int) {
		for i, v := range b {
			if known[off+uint64(i)] && buf[off+uint64(i)] != v {
				t.Fatalf("frame %d: the capture shows byte %#x of the region changing between reads", frame, off+uint64(i))
			}
			buf[off+uint64(i)], known[off+uint64(i)] = v, true
		}
	}
	for i := range theirs {
		m := &theirs[i]
		frame := cp.pkts[m.first].frame
		switch {
		case m.op == wire.ReadRequest:
			fill(m.reth.VA-me.va, m.resp, frame)
		case m.op.IsAtomic():
			if off := m.atomic.VA - me.va; !known[off] {
				var v [8]byte
				binary.NativeEndian.PutUint64(v[:], m.orig)
				fill(off, v[:], frame)
			}
		}
	}
	model = bytes.Clone(buf)
	for i := range theirs {
		m := &theirs[i]
		switch {
		case m.op.Has(wire.IsWrite):
			copy(model[m.reth.VA-me.va:], m.data)
		case m.op.IsAtomic():
			p := model[m.atomic.VA-me.va:]
			v := binary.NativeEndian.Uint64(p)
			if v != m.orig {
				t.Fatalf("frame %d: rxe's atomic returned %#x, but the memory held %#x", cp.pkts[m.first].frame, m.orig, v)
			}
			switch {
			case m.op == wire.FetchAdd:
				v += m.atomic.SwapAdd
			case v == m.atomic.Compare:
				v = m.atomic.SwapAdd
			}
			binary.NativeEndian.PutUint64(p, v)
		}
	}
	access := AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic
	if _, err := pd.regMRAt(buf, me.va, me.rkey, access); err != nil {
		t.Fatal(err)
	}
	return buf, model
}

func connectReplayQP(t *testing.T, qp *QP, sc *replayScenario, me, peer qpInfo, peerIP netip.Addr, rdAtomic uint8) {
	t.Helper()
	if sc.typ == QPTypeUD {
		steps := []struct {
			a QPAttr
			m QPAttrMask
		}{
			{QPAttr{State: QPStateInit, PortNum: 1, QKey: sc.qkey}, QPAttrState | QPAttrPKeyIndex | QPAttrPort | QPAttrQKey},
			{QPAttr{State: QPStateRTR}, QPAttrState},
			{QPAttr{State: QPStateRTS, SQPSN: me.psn}, QPAttrState | QPAttrSQPSN},
		}
		for _, s := range steps {
			if err := qp.Modify(&s.a, s.m); err != nil {
				t.Fatal(err)
			}
		}
		return
	}
	rc := sc.typ == QPTypeRC
	if err := qp.Modify(&QPAttr{State: QPStateInit, PortNum: 1, AccessFlags: sc.access},
		QPAttrState|QPAttrPKeyIndex|QPAttrPort|QPAttrAccessFlags); err != nil {
		t.Fatal(err)
	}
	rtr := &QPAttr{State: QPStateRTR, AH: AHAttr{DGID: wire.GIDFromAddr(peerIP), PortNum: 1, HopLimit: 64},
		PathMTU: sc.pathMTU, DestQPN: peer.qpn, RQPSN: peer.psn, MaxDestRdAtomic: rdAtomic, MinRNRTimer: 12}
	mask := QPAttrState | QPAttrAV | QPAttrPathMTU | QPAttrDestQPN | QPAttrRQPSN
	if rc {
		mask |= QPAttrMaxDestRdAtomic | QPAttrMinRNRTimer
	}
	if err := qp.Modify(rtr, mask); err != nil {
		t.Fatal(err)
	}
	rts := &QPAttr{State: QPStateRTS, SQPSN: me.psn, Timeout: 20, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: rdAtomic}
	mask = QPAttrState | QPAttrSQPSN
	if rc {
		mask |= QPAttrTimeout | QPAttrRetryCnt | QPAttrRNRRetry | QPAttrMaxQPRdAtomic
	}
	if err := qp.Modify(rts, mask); err != nil {
		t.Fatal(err)
	}
}

// pollAll returns up to n completions that are already in cq.
func pollAll(t *testing.T, cq *CQ, n int) []WC {
	t.Helper()
	wc := make([]WC, n)
	k, err := cq.Poll(wc)
	if err != nil {
		t.Fatal(err)
	}
	return wc[:k]
}

// comparePackets compares what the engine sent with what rxe sent in the
// same role, packet by packet.
func comparePackets(t *testing.T, got []sentPkt, want []*capPkt, dst netip.AddrPort) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("sent %d packets, rxe sent %d", len(got), len(want))
	}
	bad := 0
	for i := range max(len(got), len(want)) {
		if bad >= 10 {
			t.Errorf("(further differences not shown)")
			return
		}
		switch {
		case i >= len(want):
			t.Errorf("our packet #%d has no counterpart: %s", i, describe(got[i].buf))
			bad++
			continue
		case i >= len(got):
			t.Errorf("rxe's frame %d has no counterpart: %s", want[i].frame, describe(want[i].raw))
			bad++
			continue
		}
		w := want[i]
		d := diffPacket(got[i].buf, w)
		if got[i].dst != dst {
			d = append(d, fmt.Sprintf("destination: ours %v, rxe %v", got[i].dst, dst))
		}
		if w.dst.Port() != dst.Port() {
			d = append(d, fmt.Sprintf("captured destination port %d", w.dst.Port()))
		}
		if len(d) > 0 {
			bad++
			t.Errorf("frame %d (our packet #%d, rxe %s):\n  %s", w.frame, i, w.pkt.Opcode(), strings.Join(d, "\n  "))
		}
	}
}

func describe(b []byte) string {
	var p wire.Packet
	if err := p.Parse(b); err != nil {
		return err.Error()
	}
	return fmt.Sprintf("%v PSN %v", p.Opcode(), p.BTH.PSN())
}

// diffPacket lists the fields in which got differs from rxe's packet.
func diffPacket(got []byte, want *capPkt) []string {
	var p wire.Packet
	if err := p.Parse(got); err != nil {
		return []string{"our packet does not parse: " + err.Error()}
	}
	var d []string
	diffValue("", reflect.ValueOf(p.Fields()), reflect.ValueOf(want.pkt.Fields()), &d)
	if !bytes.Equal(p.Payload, want.pkt.Payload) {
		i := 0
		for i < len(p.Payload) && i < len(want.pkt.Payload) && p.Payload[i] == want.pkt.Payload[i] {
			i++
		}
		d = append(d, fmt.Sprintf("payload: ours %d bytes, rxe %d, first difference at byte %d", len(p.Payload), len(want.pkt.Payload), i))
	}
	if !bytes.Equal(p.Pad, want.pkt.Pad) {
		d = append(d, fmt.Sprintf("pad: ours %x, rxe %x", p.Pad, want.pkt.Pad))
	}
	if len(d) == 0 && !bytes.Equal(got[:len(got)-wire.ICRCSize], want.raw[:len(want.raw)-wire.ICRCSize]) {
		d = append(d, fmt.Sprintf("bytes differ outside the decoded fields:\n    ours %x\n    rxe  %x", got, want.raw))
	}
	return d
}

func diffValue(name string, a, b reflect.Value, d *[]string) {
	if a.Kind() == reflect.Struct {
		for i := range a.NumField() {
			n := a.Type().Field(i).Name
			if name != "" {
				n = name + "." + n
			}
			diffValue(n, a.Field(i), b.Field(i), d)
		}
		return
	}
	if !a.Equal(b) {
		*d = append(*d, fmt.Sprintf("%s: ours %v, rxe %v", name, a.Interface(), b.Interface()))
	}
}
