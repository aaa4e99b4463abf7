package sniff_test

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tbrdma/tbrdma/transport"
	"github.com/tbrdma/tbrdma/transport/sniff"
	"github.com/tbrdma/tbrdma/transport/wire"
)

// The loopback addresses of TestLoopbackTShark: distinct from those of the
// other packages' tests (127.0.0.1-6), which run in parallel and also bind
// UDP 4791. Linux routes all of 127/8 to lo.
var (
	tsharkA = netip.MustParseAddrPort("127.0.0.41:4791") // sender
	tsharkB = netip.MustParseAddrPort("127.0.0.42:4791") // receiver
)

// Header values of the generated traffic, in the style of rdma_rxe and
// perftest (QPNs from 0x11, perftest's UD Q_Key 0x11111111, a user-space
// virtual address, 4096-byte path MTU).
const (
	ltRCQPN    wire.QPN  = 0x000011
	ltUCQPN    wire.QPN  = 0x000012
	ltUDQPN    wire.QPN  = 0x000013
	ltUDSrcQPN wire.QPN  = 0x000014
	ltQKey     wire.QKey = 0x11111111
	ltRKey     wire.RKey = 0x00001a2b
	ltVA                 = 0x00007f3ac0de0000
	ltMTU                = 4096
	ltFirstPSN wire.PSN  = 0xfffff0 // wraps through 0 early on
)

// ltPacket is one packet of the generated traffic.
type ltPacket struct {
	op    wire.Opcode
	size  int    // payload bytes
	what  string // for messages
	batch int    // index of the WriteBatch call that sent it
	buf   []byte // the whole packet; WriteBatch fills in the ICRC
}

func (p *ltPacket) psn() wire.PSN { return wire.BTH(p.buf).PSN() }

func (p *ltPacket) String() string {
	return fmt.Sprintf("%v %s (PSN %v, %d-byte payload, %d-byte packet)", p.op, p.what, p.psn(), p.size, len(p.buf))
}

// ltTraffic builds the packets, batch by batch. Every packet gets its own
// PSN, so a PSN identifies a packet.
type ltTraffic struct {
	psn     wire.PSN
	msn     uint32
	batches [][]*ltPacket
}

func (tr *ltTraffic) newBatch() { tr.batches = append(tr.batches, nil) }

// add appends a packet of opcode op with size payload bytes to the current
// batch; edit, if not nil, adjusts the headers, and payload, if not nil,
// replaces the generated payload.
func (tr *ltTraffic) add(t *testing.T, op wire.Opcode, size int, what string, edit func(*wire.Headers), payload []byte) {
	t.Helper()
	psn := tr.psn
	tr.psn = tr.psn.Next()
	h := wire.Headers{BTH: wire.BTHFields{Opcode: op, PKey: wire.PKeyDefault, PSN: psn}}
	switch op.Class() {
	case wire.ClassRC:
		h.BTH.DestQP = ltRCQPN
	case wire.ClassUC:
		h.BTH.DestQP = ltUCQPN
	case wire.ClassUD:
		h.BTH.DestQP = ltUDQPN
	}
	// rxe asks for an ACK on the last packet of an RC request and sets it
	// on UD sends too (see testdata/rxe/rping.pcap); SE on SENDs with
	// immediate data, as a solicited completion would.
	end := op.Has(wire.IsLast) || op.Has(wire.IsOnly)
	h.BTH.AckReq = op.Has(wire.IsRequest) && end && op.Class() != wire.ClassUC
	h.BTH.SE = op.Has(wire.IsSend|wire.HasImmDt) && end
	h.DETH = wire.DETHFields{QKey: ltQKey, SrcQP: ltUDSrcQPN}
	dma := uint32(size)
	switch {
	case op.Has(wire.IsFirst):
		dma = uint32(size) + 2*ltMTU // first, one middle, last
	case op == wire.ReadRequest:
		dma = 4 * ltMTU
	}
	h.RETH = wire.RETHFields{VA: ltVA + uint64(psn&0xff)<<12, RKey: ltRKey, DMALen: dma}
	h.AtomicETH = wire.AtomicETHFields{VA: ltVA + 0x40, RKey: ltRKey}
	switch op {
	case wire.CompareSwap:
		h.AtomicETH.SwapAdd, h.AtomicETH.Compare = 0x1122334455667788, 0x0102030405060708
	case wire.FetchAdd:
		h.AtomicETH.SwapAdd = 1
	}
	if op.Has(wire.HasAETH) {
		h.AETH = wire.AETHFields{Syndrome: wire.SyndromeACK, MSN: tr.msn}
		tr.msn++
	}
	h.AtomicAckETH = wire.AtomicAckETHFields{Orig: 0x0102030405060708}
	h.ImmDt = wire.ImmDtFields{Imm: 0xc0ffee00 | uint32(psn&0xff)}
	h.IETH = wire.IETHFields{RKey: ltRKey}
	if edit != nil {
		edit(&h)
	}
	if payload == nil {
		payload = make([]byte, size)
		for i := range payload {
			payload[i] = byte(i*7 + int(psn))
		}
	}
	if !op.Has(wire.HasPayload) && len(payload) != 0 {
		t.Fatalf("%v carries no payload", op)
	}
	buf := wire.AppendPacket(make([]byte, 0, op.HdrLen()+len(payload)+3+wire.ICRCSize), &h, payload)
	var p wire.Packet
	if err := p.Parse(buf); err != nil {
		t.Fatalf("%v %s: built a packet that does not parse: %v", op, what, err)
	}
	b := len(tr.batches) - 1
	tr.batches[b] = append(tr.batches[b], &ltPacket{op: op, size: len(payload), what: what, batch: b, buf: buf})
}

// cmDREQ returns a 256-byte CM DisconnectRequest MAD, as rdma_cm sends to
// QP1 when a connection is torn down.
func cmDREQ() []byte {
	m := wire.MADFields{
		BaseVersion:   wire.MADBaseVersion,
		MgmtClass:     wire.MgmtClassCM,
		ClassVersion:  wire.CMClassVersion,
		Method:        wire.MethodSend,
		TransactionID: 0x000000027bf97160,
		AttributeID:   0x0015, // DREQ
	}.Append(make([]byte, 0, wire.MADSize))
	m = binary.BigEndian.AppendUint32(m, 0x6071f97b)         // local communication ID
	m = binary.BigEndian.AppendUint32(m, 0xa9b5c8e4)         // remote communication ID
	m = binary.BigEndian.AppendUint32(m, uint32(ltRCQPN)<<8) // remote QPN, reserved
	return append(m, make([]byte, wire.MADSize-len(m))...)   // private data
}

// ltBuildTraffic returns one packet of every RC, UC and UD opcode per
// payload size (0, 1, 2, 3 and 4096 bytes for opcodes with a payload), an
// ACK with each kind of AETH syndrome, a CM MAD to QP1, and runs of
// equal-sized packets that UDP GSO sends as one datagram.
func ltBuildTraffic(t *testing.T) (batches [][]*ltPacket, opcodes []wire.Opcode) {
	tr := &ltTraffic{psn: ltFirstPSN}
	sizes := []int{0, 1, 2, 3, ltMTU} // 1 and 3 bytes need 3 and 1 pad bytes
	syndromes := []struct {
		s    wire.Syndrome
		what string
	}{
		{wire.SyndromeACK, "ACK"},
		{wire.SyndromeRNR(14), "RNR NAK"},
		{wire.SyndromePSNSeqError, "NAK PSN sequence error"},
		{wire.SyndromeInvalidReq, "NAK invalid request"},
		{wire.SyndromeRemoteAccess, "NAK remote access error"},
		{wire.SyndromeRemoteOp, "NAK remote operational error"},
	}
	for op := range 256 {
		if wire.Opcode(op).Valid() {
			opcodes = append(opcodes, wire.Opcode(op))
		}
	}
	// Batches 0-2: every opcode of each class in turn.
	for _, class := range []wire.Opcode{wire.ClassRC, wire.ClassUC, wire.ClassUD} {
		tr.newBatch()
		for _, op := range opcodes {
			switch {
			case op.Class() != class:
			case op == wire.Acknowledge:
				for _, s := range syndromes {
					tr.add(t, op, 0, s.what, func(h *wire.Headers) { h.AETH.Syndrome = s.s }, nil)
				}
			case !op.Has(wire.HasPayload):
				tr.add(t, op, 0, "", nil, nil)
			default:
				for _, n := range sizes {
					tr.add(t, op, n, "", nil, nil)
				}
			}
		}
	}
	tr.add(t, wire.UDSendOnly, wire.MADSize, "CM DREQ MAD to QP1", func(h *wire.Headers) {
		h.BTH.DestQP = wire.QPNGSI
		h.DETH = wire.DETHFields{QKey: wire.QKeyGSI, SrcQP: wire.QPNGSI}
	}, cmDREQ())

	// Batch 3: multi-packet messages at the path MTU, as a requester and a
	// responder send them.
	tr.newBatch()
	for _, class := range []wire.Opcode{wire.ClassRC, wire.ClassUC} {
		tr.add(t, class|wire.SendFirst, ltMTU, "message", nil, nil)
		for range 3 {
			tr.add(t, class|wire.SendMiddle, ltMTU, "message", nil, nil)
		}
		tr.add(t, class|wire.SendLast, 1, "message", nil, nil)
		tr.add(t, class|wire.WriteFirst, ltMTU, "message", nil, nil)
		for range 3 {
			tr.add(t, class|wire.WriteMiddle, ltMTU, "message", nil, nil)
		}
		tr.add(t, class|wire.WriteLastImm, 3, "message", nil, nil)
	}
	tr.add(t, wire.ReadResponseFirst, ltMTU, "message", nil, nil)
	for range 3 {
		tr.add(t, wire.ReadResponseMiddle, ltMTU, "message", nil, nil)
	}
	tr.add(t, wire.ReadResponseLast, 2, "message", nil, nil)
	for range 8 {
		tr.add(t, wire.UDSendOnly, 1024, "datagram", nil, nil)
	}

	// Batch 4: long runs that exceed one GSO send: 20 packets of 4124
	// bytes overflow a 64 KiB datagram, 70 small ones the 64-segment
	// limit.
	tr.newBatch()
	for range 20 {
		tr.add(t, wire.WriteMiddle, ltMTU, "long message", nil, nil)
	}
	for range 70 {
		tr.add(t, wire.ClassUC|wire.WriteMiddle, 256, "long message", nil, nil)
	}
	return tr.batches, opcodes
}

// ltFrame is one packet read back from a capture.
type ltFrame struct {
	n        int // frame number, from 1
	ip, udp  []byte
	roce     []byte // UDP payload
	src, dst netip.AddrPort
}

func (f *ltFrame) ipID() uint16 { return binary.BigEndian.Uint16(f.ip[4:]) }

// ltReadCapture returns the UDP frames of a pcap file; it fails on any
// frame DecodeUDP does not take.
func ltReadCapture(t *testing.T, path string) []ltFrame {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := sniff.NewReader(bufio.NewReader(f))
	if err != nil {
		t.Fatal(err)
	}
	var frames []ltFrame
	for n := 1; ; n++ {
		p, err := r.Next()
		if err == io.EOF {
			return frames
		}
		if err != nil {
			t.Fatalf("%s: frame %d: %v", filepath.Base(path), n, err)
		}
		if p.OrigLen != len(p.Data) {
			t.Fatalf("%s: frame %d truncated: %d of %d bytes", filepath.Base(path), n, len(p.Data), p.OrigLen)
		}
		data := bytes.Clone(p.Data)
		ip, udp, roce, src, dst, ok := sniff.DecodeUDP(p.LinkType, data)
		if !ok {
			t.Fatalf("%s: frame %d (link type %d) is not a UDP datagram:\n% x", filepath.Base(path), n, p.LinkType, data)
		}
		frames = append(frames, ltFrame{n: n, ip: ip, udp: udp, roce: roce, src: src, dst: dst})
	}
}

// ltCheckICRC checks the ICRC of frame f against the IP and UDP headers it
// was captured with.
func ltCheckICRC(f *ltFrame) error {
	if len(f.roce) < wire.BTHSize+wire.ICRCSize {
		return fmt.Errorf("frame %d: %d-byte UDP payload", f.n, len(f.roce))
	}
	want, ok := wire.ICRCFromHeaders(f.ip, f.udp, f.roce[:len(f.roce)-wire.ICRCSize])
	if !ok {
		return fmt.Errorf("frame %d: ICRCFromHeaders does not take the captured headers\n% x\n% x", f.n, f.ip, f.udp)
	}
	if got := wire.Trailer(f.roce); got != want {
		return fmt.Errorf("frame %d (%v, IP ID %d): ICRC trailer %#08x, computed from the captured headers %#08x",
			f.n, wire.BTH(f.roce).Opcode(), f.ipID(), got, want)
	}
	return nil
}

// TestLoopbackTShark sends one packet of every RC, UC and UD opcode (with
// realistic headers and 0-, 1-, 2-, 3- and 4096-byte payloads) between two
// real UDP endpoints on loopback, in batches that UDP GSO may coalesce,
// records the sender and the receiver with sniff.Wrap and checks that
//
//   - the receiver gets every packet, byte for byte;
//   - every recorded packet's ICRC verifies against the IPv4 and UDP
//     headers in the capture, and the IP IDs of the segments of a GSO send
//     count up from 0 as the kernel numbers them;
//   - tshark decodes every frame as InfiniBand with the opcode, PSN and
//     ICRC sent, finds no malformed packet and raises no expert info;
//   - when running as root with tcpdump available, a capture of lo made by
//     the kernel is decodable too, and its single-packet datagrams carry
//     the ICRC their real IPv4 header calls for.
//
// It runs twice: with UDP GSO (where the kernel has it) and without, where
// tcpdump sees every packet as its own datagram, so that every ICRC is
// checked against an IPv4 header the kernel wrote.
func TestLoopbackTShark(t *testing.T) {
	for _, c := range []struct {
		name string
		opts *transport.Options
	}{
		{"GSO", nil},
		{"NoGSO", &transport.Options{DisableGSO: true}},
	} {
		// The traffic is the same both times: decode it with the MANIFEST's
		// tshark options only once.
		t.Run(c.name, func(t *testing.T) { ltLoopback(t, c.opts, c.opts == nil) })
	}
}

// ltLoopback is one run of TestLoopbackTShark, with the sender opened with
// opts; manifest adds the run of tshark with the MANIFEST's options.
func ltLoopback(t *testing.T, opts *transport.Options, manifest bool) {
	a, err := transport.Open(tsharkA, opts)
	if err != nil {
		if runtime.GOOS != "linux" {
			t.Skipf("cannot bind %v on %s (only Linux routes all of 127/8 to the loopback interface): %v", tsharkA, runtime.GOOS, err)
		}
		t.Fatal(err)
	}
	defer a.Close()
	b, err := transport.Open(tsharkB, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	off, _ := transport.OffloadsOf(a)
	t.Logf("sender offloads: GSO %v (%v), GRO %v (%v)", off.GSO, off.GSOError, off.GRO, off.GROError)

	dir := t.TempDir()
	txPath, rxPath := filepath.Join(dir, "tx.pcap"), filepath.Join(dir, "rx.pcap")
	txFile, txBuf, txRec := ltCreateRecorder(t, txPath)
	rxFile, rxBuf, rxRec := ltCreateRecorder(t, rxPath)
	sender, receiver := sniff.Wrap(a, txRec), sniff.Wrap(b, rxRec)

	var tcpdumpPath string
	stopTcpdump := func() bool { return false }
	if !testing.Short() {
		tcpdumpPath = filepath.Join(dir, "lo.pcap")
		if stop := ltStartTcpdump(t, tcpdumpPath); stop != nil {
			stopTcpdump = stop
		} else {
			tcpdumpPath = ""
		}
	}

	batches, opcodes := ltBuildTraffic(t)
	var sent []*ltPacket // in send order
	byPSN := map[wire.PSN]*ltPacket{}
	for _, batch := range batches {
		for _, p := range batch {
			sent = append(sent, p)
			byPSN[p.psn()] = p
		}
	}

	// Send batch by batch; after each, receive it on b before sending the
	// next, so that even a receive buffer capped at a small
	// net.core.rmem_max (tests not run as root) holds a whole batch.
	type rxPacket struct {
		buf  []byte
		src  netip.AddrPort
		ipID uint16
	}
	var received []rxPacket
	rxMsgs := make([]transport.Message, receiver.BatchSize())
	timeout := time.AfterFunc(10*time.Second, func() { receiver.Close() })
	defer timeout.Stop()
	for i, batch := range batches {
		msgs := make([]transport.Message, len(batch))
		for j, p := range batch {
			msgs[j] = transport.Message{Buf: p.buf, Addr: tsharkB}
		}
		for done := 0; done < len(msgs); {
			n, err := sender.WriteBatch(msgs[done:])
			done += n
			if err != nil {
				t.Fatalf("batch %d: WriteBatch sent %d of %d: %v", i, done, len(msgs), err)
			}
		}
		for want := len(received) + len(batch); len(received) < want; {
			n, err := receiver.ReadBatch(rxMsgs)
			for _, m := range rxMsgs[:n] {
				received = append(received, rxPacket{bytes.Clone(m.Buf), m.Addr, m.IPID})
			}
			if err != nil {
				t.Fatalf("batch %d: ReadBatch after %d of %d packets sent so far (10 s timeout?): %v; receiver stats %+v",
					i, len(received), want, err, b.Stats())
			}
		}
	}
	timeout.Stop()
	if stopTcpdump() {
		t.Log("tcpdump: the kernel dropped packets from the capture; not checking it")
		tcpdumpPath = ""
	}
	if err := sender.Close(); err != nil {
		t.Fatalf("closing the sender: %v", err)
	}
	if err := receiver.Close(); err != nil {
		t.Fatalf("closing the receiver: %v", err)
	}
	for _, f := range []struct {
		file *os.File
		buf  *bufio.Writer
	}{{txFile, txBuf}, {rxFile, rxBuf}} {
		if err := errors.Join(f.buf.Flush(), f.file.Close()); err != nil {
			t.Fatal(err)
		}
	}

	// The receiver got every packet once, byte for byte.
	if st := b.Stats(); st.Drops != ([wire.NumReasons]uint64{}) {
		t.Errorf("receiver dropped packets: %v", st.Drops)
	}
	if len(received) != len(sent) {
		t.Fatalf("received %d packets, sent %d", len(received), len(sent))
	}
	seen := map[wire.PSN]bool{}
	for i, r := range received {
		psn := wire.BTH(r.buf).PSN()
		p := byPSN[psn]
		switch {
		case p == nil:
			t.Errorf("received packet %d: PSN %v was not sent", i, psn)
		case seen[psn]:
			t.Errorf("received packet %d: PSN %v twice", i, psn)
		case !bytes.Equal(r.buf, p.buf):
			t.Errorf("received packet %d differs from the one sent: %v", i, p)
		case r.src != tsharkA:
			t.Errorf("received packet %d from %v, want %v", i, r.src, tsharkA)
		}
		seen[psn] = true
	}

	// (1) The sender's capture: the packets sent, in order, each with an
	// ICRC that verifies against the recorded headers.
	tx := ltReadCapture(t, txPath)
	if len(tx) != len(sent) {
		t.Fatalf("sender capture holds %d frames, %d packets were sent", len(tx), len(sent))
	}
	coalesced, gsoSends := 0, 0
	for i := range tx {
		f, p := &tx[i], sent[i]
		if f.src != tsharkA || f.dst != tsharkB || !bytes.Equal(f.roce, p.buf) {
			t.Errorf("sender frame %d (%v -> %v) is not packet %v", f.n, f.src, f.dst, p)
		}
		if err := ltCheckICRC(f); err != nil {
			t.Errorf("sender capture: %v", err)
		}
		// Segment k of a GSO send carries IP ID k: an ID is 0 or follows
		// the previous packet's, which must then be a full-size segment of
		// the same send.
		id := f.ipID()
		if id == 0 {
			continue
		}
		coalesced++
		if id == 1 {
			gsoSends++
		}
		prev := 0
		if i > 0 {
			prev = int(tx[i-1].ipID())
		}
		if i == 0 || sent[i-1].batch != p.batch || prev != int(id)-1 || len(p.buf) > len(sent[i-1].buf) ||
			(prev > 0 && (i < 2 || len(sent[i-1].buf) != len(sent[i-2].buf))) {
			t.Errorf("sender frame %d (%v): IP ID %d does not continue a GSO send", f.n, p, id)
		}
	}
	if off.GSO {
		// Within a batch, each run of equal-sized packets went out as GSO
		// sends: the IP IDs differ from one packet to the next, except
		// where a send reached 64 segments or 64 KiB, or ended with a
		// shorter packet.
		for i := 1; i < len(sent); i++ {
			p, q := sent[i-1], sent[i]
			if p.batch != q.batch || len(p.buf) != len(q.buf) || tx[i].ipID() != 0 {
				continue
			}
			// The GSO send that ended with p: its segments and bytes.
			start := i - 1 - int(tx[i-1].ipID())
			segs, size := i-start, 0
			for k := max(start, 0); k < i; k++ {
				size += len(sent[k].buf)
			}
			if start >= 0 && len(sent[start].buf) != len(p.buf) {
				continue // p was the shorter last segment of a send
			}
			if segs < 64 && size+len(q.buf) <= sniff.MaxUDPPayloadIPv4 {
				t.Errorf("sender frames %d and %d: equal-sized packets of one batch both have IP ID 0 (%v, %v)", i, i+1, p, q)
			}
		}
		if coalesced == 0 {
			t.Errorf("GSO is on but no packet was sent as a later GSO segment (all IP IDs 0)")
		}
	} else if coalesced != 0 {
		t.Errorf("GSO is off but %d packets were recorded with a non-zero IP ID", coalesced)
	}
	t.Logf("sent %d packets of %d opcodes in %d batches; %d GSO sends carried %d packets beyond the first segment",
		len(sent), len(opcodes), len(batches), gsoSends, coalesced)

	// The receiver's capture: what it received, with the IP ID it
	// recovered from the ICRC, which must be the one the sender used.
	rx := ltReadCapture(t, rxPath)
	if len(rx) != len(received) {
		t.Fatalf("receiver capture holds %d frames, %d packets were received", len(rx), len(received))
	}
	txID := map[wire.PSN]uint16{}
	for i := range tx {
		txID[wire.BTH(tx[i].roce).PSN()] = tx[i].ipID()
	}
	for i := range rx {
		f := &rx[i]
		if err := ltCheckICRC(f); err != nil {
			t.Errorf("receiver capture: %v", err)
		}
		psn := wire.BTH(f.roce).PSN()
		if want := txID[psn]; f.ipID() != want || received[i].ipID != want {
			t.Errorf("receiver frame %d (PSN %v): IP ID %d (message %d), the sender's %d", f.n, psn, f.ipID(), received[i].ipID, want)
		}
	}
	if t.Failed() {
		return
	}

	// (2) tshark on both captures.
	if testing.Short() {
		t.Skip("-short: skipping the tshark and tcpdump checks")
	}
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark is not on PATH: skipping the Wireshark checks of the loopback captures (install it with: apt-get install tshark)")
	}
	if manifest {
		ltCheckManifestTshark(t, tshark, txPath, tx)
	}
	for _, c := range []struct {
		name, path string
		frames     []ltFrame
	}{{"sender", txPath, tx}, {"receiver", rxPath, rx}} {
		recs := ltRunTshark(t, tshark, c.path, ltNoUDHeuristics...)
		if len(recs) != len(c.frames) {
			t.Fatalf("%s capture: tshark decoded %d frames, the capture holds %d", c.name, len(recs), len(c.frames))
		}
		ops := map[wire.Opcode]int{}
		bad := 0
		for i, rec := range recs {
			f := &c.frames[i]
			op := wire.BTH(f.roce).Opcode()
			ops[op]++
			errs := ltCheckTsharkFrame(rec, f, true)
			for _, e := range errs {
				t.Errorf("%s capture: frame %d (%v): %s", c.name, f.n, op, e)
			}
			if len(errs) > 0 {
				bad++
			}
		}
		for _, op := range opcodes {
			if ops[op] == 0 {
				t.Errorf("%s capture: tshark saw no %v", c.name, op)
			}
		}
		if bad == 0 {
			t.Logf("tshark, %s capture: %d frames, %d opcodes, each decoded as InfiniBand with the opcode, PSN and ICRC sent; no malformed packet, no expert info",
				c.name, len(recs), len(ops))
		}
	}

	// (3) The kernel's view of lo, if tcpdump ran.
	if tcpdumpPath == "" {
		return
	}
	ltCheckTcpdump(t, tshark, tcpdumpPath, sent)
}

// ltCreateRecorder creates a pcap file with a Recorder writing to it
// through a buffer.
func ltCreateRecorder(t *testing.T, path string) (*os.File, *bufio.Writer, *sniff.Recorder) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	w := bufio.NewWriterSize(f, 1<<16)
	rec, err := sniff.NewRecorder(w)
	if err != nil {
		t.Fatal(err)
	}
	return f, w, rec
}

// ltTsharkFields are the fields asked of tshark (names from
// `tshark -G fields`, tshark 4.0); _ws.expert.message comes last because it
// is free text.
var ltTsharkFields = []string{
	"frame.number",
	"udp.dstport",
	"infiniband.bth.opcode",
	"infiniband.bth.psn",
	"infiniband.invariant.crc",
	"_ws.malformed",
	"_ws.expert.severity",
	"_ws.expert.message",
}

// ltNoUDHeuristics turns off, besides the RPC-over-RDMA heuristic the
// MANIFEST turns off, the two heuristic sub-dissectors of tshark 4.0 that
// misread the payload of a UD SEND (see ltCheckManifestTshark):
//
//   - mellanox_eoib ("Mellanox EoIB Encapsulation Header") reads the first
//     byte of the payload even when there is none: every UD SEND with a
//     0-byte payload (tbrdma's or rdma_rxe's) becomes "Malformed Packet:
//     Mellanox EoIB", and when the ICRC's first two bits happen to be 11 it
//     may also parse on into an empty Ethernet frame.
//   - eth_over_ib ("IBA Payload - appears to be EtherType encapsulated")
//     takes the first two payload bytes for an EtherType and hands the rest
//     to that protocol: a 1-byte payload 0x08, 0x81 or 0x91 (with its zero
//     pad: 0x0800, 0x8100, 0x9100) turns into an empty IPv4 packet or VLAN
//     tag, which is malformed.
//
// Both are guesses about what the application put in the payload, not
// checks of the RoCEv2 headers; with them off tshark shows the payload as
// data and goes on to read the ICRC.
var ltNoUDHeuristics = []string{"--disable-heuristic", "mellanox_eoib", "--disable-heuristic", "eth_over_ib"}

// ltRunTshark decodes a capture as the MANIFEST does (UDP 4791 as
// InfiniBand, the RPC-over-RDMA heuristic off: it misreads RC SEND
// payloads), with extra options, and returns one field map per frame, in
// order.
func ltRunTshark(t *testing.T, tshark, path string, extra ...string) []map[string]string {
	t.Helper()
	args := []string{"-n", "-r", path,
		"-d", "udp.port==4791,infiniband", "--disable-protocol", "rpcordma",
		"-T", "fields", "-E", "separator=/t", "-E", "aggregator=;", "-E", "occurrence=a"}
	args = append(args, extra...)
	for _, f := range ltTsharkFields {
		args = append(args, "-e", f)
	}
	cmd := exec.Command(tshark, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v: %v\n%s", cmd, err, stderr.String())
	}
	for _, line := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
		// tshark warns when run as root; anything else is a failure.
		if line != "" && !strings.Contains(line, `Running as user "root"`) {
			t.Errorf("tshark stderr: %s", line)
		}
	}
	var recs []map[string]string
	for _, line := range strings.Split(strings.TrimRight(stdout.String(), "\n"), "\n") {
		cols := strings.SplitN(line, "\t", len(ltTsharkFields))
		if len(cols) != len(ltTsharkFields) {
			t.Fatalf("tshark line has %d columns, want %d: %q", len(cols), len(ltTsharkFields), line)
		}
		rec := map[string]string{}
		for i, f := range ltTsharkFields {
			rec[f] = cols[i]
		}
		if n, err := strconv.Atoi(rec["frame.number"]); err != nil || n != len(recs)+1 {
			t.Fatalf("tshark line %d is frame %q", len(recs)+1, rec["frame.number"])
		}
		recs = append(recs, rec)
	}
	return recs
}

// ltCheckManifestTshark decodes the sender's capture with exactly the
// options of the MANIFEST (only the RPC-over-RDMA heuristic off) and checks
// that the only malformed frames are UD SENDs that the mellanox_eoib or
// eth_over_ib heuristic took for an Ethernet frame (see ltNoUDHeuristics);
// every other frame must pass as in the main check.
func ltCheckManifestTshark(t *testing.T, tshark, path string, frames []ltFrame) {
	t.Helper()
	recs := ltRunTshark(t, tshark, path)
	if len(recs) != len(frames) {
		t.Fatalf("sender capture, MANIFEST options: tshark decoded %d frames, the capture holds %d", len(recs), len(frames))
	}
	var misfires []string
	for i, rec := range recs {
		f := &frames[i]
		op := wire.BTH(f.roce).Opcode()
		mal := rec["_ws.malformed"]
		if mal != "" && op.Class() == wire.ClassUD &&
			(strings.Contains(mal, "Mellanox EoIB") || strings.Contains(mal, "Ethernet") || strings.Contains(mal, "Ethertype")) {
			var p wire.Packet
			if err := p.Parse(f.roce); err != nil {
				t.Errorf("sender capture: frame %d: %v", f.n, err)
			}
			misfires = append(misfires, fmt.Sprintf("frame %d (%v, payload % x): %s", f.n, op, p.Payload, mal))
			continue
		}
		for _, e := range ltCheckTsharkFrame(rec, f, true) {
			t.Errorf("sender capture, MANIFEST options: frame %d (%v): %s", f.n, op, e)
		}
	}
	t.Logf("tshark with the MANIFEST options: %d frames, %d of them UD SENDs misread by the mellanox_eoib / eth_over_ib heuristics (allowed; the checks below turn them off):\n\t%s",
		len(recs), len(misfires), strings.Join(misfires, "\n\t"))
}

// ltSeverities names tshark's expert severity levels (epan/proto.h,
// PI_CHAT .. PI_ERROR), which -T fields prints as numbers.
var ltSeverities = map[string]string{
	"1048576": "comment", "2097152": "chat", "4194304": "note", "6291456": "warning", "8388608": "error",
}

// ltCheckTsharkFrame returns what is wrong with tshark's record of frame f.
// whole says that f holds exactly one RoCEv2 packet (not a GSO super-packet
// seen on lo), so its trailer is an ICRC tshark must read where we put it.
func ltCheckTsharkFrame(rec map[string]string, f *ltFrame, whole bool) []string {
	var errs []string
	bth := wire.BTH(f.roce)
	if got := rec["udp.dstport"]; got != strconv.Itoa(wire.UDPPort) {
		errs = append(errs, fmt.Sprintf("UDP destination port %q", got))
	}
	if got := rec["infiniband.bth.opcode"]; got != strconv.Itoa(int(bth.Opcode())) {
		errs = append(errs, fmt.Sprintf("tshark decodes opcode %q, we sent %d", got, bth.Opcode()))
	}
	if got, err := strconv.ParseUint(rec["infiniband.bth.psn"], 0, 32); err != nil || wire.PSN(got) != bth.PSN() {
		errs = append(errs, fmt.Sprintf("tshark decodes PSN %q, we sent %v", rec["infiniband.bth.psn"], bth.PSN()))
	}
	if whole {
		// tshark prints the trailer as a big-endian number.
		want := binary.BigEndian.Uint32(f.roce[len(f.roce)-wire.ICRCSize:])
		if got, err := strconv.ParseUint(rec["infiniband.invariant.crc"], 0, 32); err != nil || uint32(got) != want {
			errs = append(errs, fmt.Sprintf("tshark reads the ICRC as %q, the trailer is %#08x", rec["infiniband.invariant.crc"], want))
		}
	}
	if rec["_ws.malformed"] != "" {
		errs = append(errs, fmt.Sprintf("tshark reports a malformed packet (%s)", rec["_ws.malformed"]))
	}
	if sev := rec["_ws.expert.severity"]; sev != "" {
		var names []string
		for _, v := range strings.Split(sev, ";") {
			if n, ok := ltSeverities[v]; ok {
				v = n
			}
			names = append(names, v)
		}
		errs = append(errs, fmt.Sprintf("tshark expert info (%s): %s", strings.Join(names, ";"), rec["_ws.expert.message"]))
	}
	return errs
}

// ltStartTcpdump starts tcpdump capturing the test's traffic on lo into
// path and returns a function that stops it once it has written every
// datagram and reports whether the kernel dropped any, or nil (after
// logging why) when it cannot run.
func ltStartTcpdump(t *testing.T, path string) (stop func() (dropped bool)) {
	t.Helper()
	tcpdump, err := exec.LookPath("tcpdump")
	if err != nil {
		t.Log("tcpdump is not on PATH: no kernel-side capture of lo")
		return nil
	}
	if runtime.GOOS != "linux" || os.Geteuid() != 0 {
		t.Log("not running as root on Linux: no tcpdump capture of lo")
		return nil
	}
	filter := fmt.Sprintf("udp and src host %v and dst host %v and dst port %d", tsharkA.Addr(), tsharkB.Addr(), wire.UDPPort)
	// -B: a 64 MiB kernel buffer, so that the burst is not dropped.
	cmd := exec.Command(tcpdump, "-i", "lo", "-n", "-s", "0", "-B", "65536", "-U", "--immediate-mode", "-w", path, filter)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Logf("cannot start tcpdump: %v", err)
		return nil
	}
	var once sync.Once
	waitErr := make(chan error, 1)
	var log strings.Builder
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		signalled := false
		for sc.Scan() {
			log.WriteString(sc.Text() + "\n")
			if !signalled && strings.Contains(sc.Text(), "listening on") {
				ready <- true
				signalled = true
			}
		}
		if !signalled {
			ready <- false
		}
		waitErr <- cmd.Wait()
	}()
	kill := func() {
		once.Do(func() {
			cmd.Process.Kill()
			<-waitErr
		})
	}
	t.Cleanup(kill)
	select {
	case ok := <-ready:
		if !ok {
			kill()
			t.Logf("tcpdump exited before capturing: %s", log.String())
			return nil
		}
	case <-time.After(5 * time.Second):
		kill()
		t.Log("tcpdump did not start capturing within 5 s")
		return nil
	}
	return func() (dropped bool) {
		once.Do(func() {
			// Let tcpdump write what the kernel handed it: wait (up to 2 s)
			// for the file to stop growing, then interrupt it.
			size := int64(-1)
			for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
				fi, err := os.Stat(path)
				if err == nil && fi.Size() == size {
					break
				}
				if err == nil {
					size = fi.Size()
				}
			}
			cmd.Process.Signal(os.Interrupt)
			select {
			case <-waitErr:
			case <-time.After(5 * time.Second):
				cmd.Process.Kill()
				<-waitErr
			}
			t.Logf("tcpdump: %s", strings.ReplaceAll(strings.TrimSpace(log.String()), "\n", "; "))
			for _, line := range strings.Split(log.String(), "\n") {
				if n, ok := strings.CutSuffix(line, " packets dropped by kernel"); ok && n != "0" {
					dropped = true
				}
			}
		})
		return dropped
	}
}

// ltCheckTcpdump checks tcpdump's capture of lo. On lo the kernel never
// segments a UDP GSO send: tcpdump sees the whole send as one IPv4
// datagram (whose ID the segments would have counted up from), and the
// receiving socket splits it. So the capture's UDP payloads, concatenated,
// must be the packets sent, concatenated; a datagram holding one packet
// must carry the ICRC of its real IPv4 header; tshark must decode every
// datagram as InfiniBand with the opcode of its first packet.
func ltCheckTcpdump(t *testing.T, tshark, path string, sent []*ltPacket) {
	t.Helper()
	frames := ltReadCapture(t, path)
	var want, got []byte
	for _, p := range sent {
		want = append(want, p.buf...)
	}
	recs := ltRunTshark(t, tshark, path, ltNoUDHeuristics...)
	if len(recs) != len(frames) {
		t.Fatalf("tcpdump capture: tshark decoded %d frames, the capture holds %d", len(recs), len(frames))
	}
	k, singles, supers := 0, 0, 0 // k: index in sent of the frame's first packet
	for i := range frames {
		f := &frames[i]
		got = append(got, f.roce...)
		if k >= len(sent) {
			t.Fatalf("tcpdump capture: frame %d after the last packet sent", f.n)
		}
		if f.src != tsharkA || f.dst != tsharkB {
			t.Errorf("tcpdump capture: frame %d from %v to %v", f.n, f.src, f.dst)
		}
		// How many sent packets the datagram holds.
		n, size := 0, 0
		for size < len(f.roce) && k+n < len(sent) {
			size += len(sent[k+n].buf)
			n++
		}
		if size != len(f.roce) {
			t.Fatalf("tcpdump capture: frame %d (%d bytes) does not end on a packet boundary", f.n, len(f.roce))
		}
		whole := n == 1
		if whole {
			singles++
			if f.ipID() != 0 || binary.BigEndian.Uint16(f.ip[6:]) != 0x4000 {
				t.Errorf("tcpdump capture: frame %d: IP ID %d, flags/fragment %#04x; want 0 and DF", f.n, f.ipID(), binary.BigEndian.Uint16(f.ip[6:]))
			}
			if err := ltCheckICRC(f); err != nil {
				t.Errorf("tcpdump capture: %v", err)
			}
		} else {
			supers++
		}
		for _, e := range ltCheckTsharkFrame(recs[i], f, whole) {
			t.Errorf("tcpdump capture: frame %d (%d packet(s) from %v): %s", f.n, n, sent[k], e)
		}
		k += n
	}
	if !bytes.Equal(got, want) {
		t.Errorf("tcpdump capture: the UDP payloads (%d bytes) are not the packets sent (%d bytes)", len(got), len(want))
	}
	if t.Failed() {
		return
	}
	t.Logf("tcpdump capture of lo: %d frames for %d packets: %d single-packet datagrams (ICRC verified against the kernel's IPv4 header), %d unsegmented GSO datagrams; tshark decodes all as InfiniBand, none malformed",
		len(frames), len(sent), singles, supers)
}
