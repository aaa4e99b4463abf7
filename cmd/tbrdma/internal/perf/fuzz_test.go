package perf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/tbrdma/tbrdma/transport/sniff"
)

// FuzzPerftestExchange feeds hostile bytes to every parser of what a peer
// sends in the out-of-band exchanges: perftest's version message (with
// tbrdma's "tbseg=" offer and test-hint markers), system data, MTU, key
// messages (text over TCP, binary with rdma_cm -R), bandwidth report and
// closing handshake, and ibv_rc_pingpong's / ibv_ud_pingpong's
// "LID:QPN:PSN:GID" address and "done" with its hint.
//
// Each input is used three ways: as one message given to each parser
// directly; as the whole byte stream a TCP peer sends, replayed through
// both roles of a perftest session and of a pingpong exchange; and, split
// into messages by a one-byte length in front of each, as the SENDs an
// rdma_cm (-R) peer delivers. Properties: nothing panics; whatever a parser
// accepts is in range and survives marshal → parse unchanged.
//
// Seeds are the real exchanges in testdata/rxe (rdma-core 44, perftest
// 4.5) plus tbrdma's own messages; testdata/fuzz/FuzzPerftestExchange
// holds them and the inputs fuzzing found interesting.
func FuzzPerftestExchange(f *testing.F) {
	for _, s := range perftestExchangeSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkParsers(t, b)
		for _, server := range []bool{false, true} {
			replayPerftest(t, NewComm(&peerStream{r: bytes.NewReader(b)}, server))
			replayPerftest(t, NewMsgComm(&peerMsgs{b: b}, server))
		}
		replayPingpong(t, b)
	})
}

// checkParsers gives b, as one message, to each parser.
func checkParsers(t *testing.T, b []byte) {
	if kib := parseSegOffer(b); kib != 0 {
		if kib < 8192 || kib > 61440 || kib%4096 != 0 {
			t.Fatalf("parseSegOffer(%q) = %d, not a multiple of 4 KiB in 8..60 KiB", b, kib)
		}
		// The offer a client with that size writes carries that size.
		out := sentVersion(t, kib)
		if got := parseSegOffer(out); got != kib {
			t.Fatalf("offer of %d written as %q, parsed back as %d", kib, out, got)
		}
	}
	if d, err := ParseKey(b); err == nil {
		m := d.MarshalKey()
		if len(m) != keyLen {
			t.Fatalf("ParseKey(%q) = %+v, which marshals to %d bytes, not %d", b, d, len(m), keyLen)
		}
		if d2, err := ParseKey(m); err != nil || d2 != d {
			t.Fatalf("key %+v from %q: marshal %q parses back as %+v, %v", d, b, m, d2, err)
		}
	}
	if d, err := ParseBinaryKey(b); err == nil {
		m := d.MarshalBinaryKey()
		if d2, err := ParseBinaryKey(m); err != nil || d2 != d {
			t.Fatalf("binary key %+v from %x: marshal %x parses back as %+v, %v", d, b, m, d2, err)
		}
		// Every byte but the padding (20..23) is the marshalled value.
		if !bytes.Equal(m[:20], b[:20]) || !bytes.Equal(m[24:], b[24:]) {
			t.Fatalf("binary key %x parsed as %+v, which marshals to %x", b, d, m)
		}
	}
	if d, err := ParsePingpongDest(b); err == nil {
		if d.QPN > 0xFFFFFF || d.PSN > 0xFFFFFF {
			t.Fatalf("ParsePingpongDest(%q) = %+v: QPN or PSN beyond 24 bits", b, d)
		}
		m := d.Marshal()
		if len(m) != PingpongMsgLen {
			t.Fatalf("pingpong address %+v from %q marshals to %d bytes, not %d", d, b, len(m), PingpongMsgLen)
		}
		if d2, err := ParsePingpongDest(m); err != nil || d2 != d {
			t.Fatalf("pingpong address %+v from %q: marshal %q parses back as %+v, %v", d, b, m, d2, err)
		}
		_ = d.GIDString()
	}
	if hint, err := ReadPingpongDone(bytes.NewReader(b)); err == nil {
		if len(hint) > MaxHintLen {
			t.Fatalf("ReadPingpongDone(%q) accepted a %d-byte hint, more than %d", b, len(hint), MaxHintLen)
		}
		if hint != "" {
			// A hint a client sends is read back as it was.
			var sent bytes.Buffer
			rw := &peerStream{r: bytes.NewReader(PingpongDest{LID: ServeLID}.Marshal()), w: &sent}
			if _, err := PingpongClientExchangeHint(rw, PingpongDest{}, hint); err != nil {
				t.Fatalf("client could not send hint %q: %v", hint, err)
			}
			sent.Next(PingpongMsgLen)
			if got, err := ReadPingpongDone(&sent); err != nil || got != hint {
				t.Fatalf("hint %q sent as %q read back as %q, %v", hint, sent.Bytes(), got, err)
			}
		}
	}
}

// sentVersion returns the version message a client offering seg bytes
// writes.
func sentVersion(t *testing.T, seg int) []byte {
	var out bytes.Buffer
	in := append([]byte(Version), make([]byte, versionLen-len(Version))...)
	c := NewComm(&peerStream{r: bytes.NewReader(in), w: &out}, false)
	c.OfferSegment = seg
	if _, err := c.ExchangeVersions(); err != nil {
		t.Fatalf("version exchange with a plain peer: %v", err)
	}
	return out.Bytes()
}

// replayPerftest runs every step of a perftest session, in the order the
// CLI runs them, against a peer whose bytes are c's input; a step that
// fails does not stop the next (the parsers after it still get bytes).
func replayPerftest(t *testing.T, c *Comm) {
	c.OfferSegment = 61440
	if c.Server() {
		c.AskHint = true
	} else {
		c.Hint = "write-bw -s 65536"
	}
	if v, err := c.ExchangeVersions(); err == nil {
		if f, perr := strconv.ParseFloat(v, 64); perr != nil || f < 5.70 {
			t.Fatalf("version %q accepted", v)
		}
	}
	if p := c.PeerSegment; p != 0 && (p < 8192 || p > c.OfferSegment || p%4096 != 0) {
		t.Fatalf("agreed segment %d with an offer of %d", p, c.OfferSegment)
	}
	if len(c.Hint) > MaxHintLen {
		t.Fatalf("accepted a %d-byte hint, more than %d", len(c.Hint), MaxHintLen)
	}
	if pg, cl, err := c.ExchangeSysData(4096, 64); err == nil && (pg < 4096 || cl < 64) {
		t.Fatalf("system data %d, %d below ours", pg, cl)
	}
	if m, err := c.ExchangeMTU(3); err == nil && (m < 1 || m > 3) {
		t.Fatalf("MTU %d agreed with ours 3", m)
	}
	my := Dest{LID: 1, OutReads: 16, QPN: 0x11, PSN: 0x123456, RKey: 0x1234, VAddr: 0x7f0000001000, GIDIndex: 1}
	for range 2 {
		d, err := c.HandShake(my)
		if err != nil {
			continue
		}
		if d.QPN > 0xFFFFFF || d.PSN > 0xFFFFFF {
			t.Fatalf("peer key %+v: QPN or PSN beyond 24 bits", d)
		}
		if c.rdmaCM {
			if d2, err := ParseBinaryKey(d.MarshalBinaryKey()); err != nil || d2 != d {
				t.Fatalf("binary key %+v does not round-trip: %+v, %v", d, d2, err)
			}
		} else if d2, err := ParseKey(d.MarshalKey()); err != nil || d2 != d {
			t.Fatalf("key %+v does not round-trip: %+v, %v", d, d2, err)
		}
	}
	_, _ = c.ExchangeBWReport(BWReport{Size: 65536, Iters: 5000, Peak: 1, Average: 1, MsgRate: 0.1})
	_ = c.Close(my)
}

// replayPingpong runs both sides of ibv_rc_pingpong's exchange (which
// ibv_ud_pingpong shares) against a peer whose bytes are b.
func replayPingpong(t *testing.T, b []byte) {
	my := PingpongDest{LID: 0, QPN: 0x11, PSN: 0xabcdef, GID: [16]byte{10: 0xff, 11: 0xff, 12: 198, 13: 18, 15: 1}}
	check := func(d PingpongDest) {
		if d2, err := ParsePingpongDest(d.Marshal()); err != nil || d2 != d {
			t.Fatalf("peer address %+v does not round-trip: %+v, %v", d, d2, err)
		}
	}
	connected := false
	d, err := PingpongServerExchange(&peerStream{r: bytes.NewReader(b)}, my, func(d PingpongDest) error {
		connected = true
		check(d)
		return nil
	})
	if err == nil {
		if !connected {
			t.Fatal("server exchange succeeded without connecting the QP")
		}
		check(d)
	}
	if d, err := PingpongClientExchangeHint(&peerStream{r: bytes.NewReader(b)}, my, "pingpong -s 4096"); err == nil {
		check(d)
	}
}

// peerStream is a TCP connection to a peer: reads come from r, writes go
// to w (discarded when nil).
type peerStream struct {
	r io.Reader
	w io.Writer
}

func (p *peerStream) Read(b []byte) (int, error) { return p.r.Read(b) }

func (p *peerStream) Write(b []byte) (int, error) {
	if p.w == nil {
		return len(b), nil
	}
	return p.w.Write(b)
}

// peerMsgs is an rdma_cm peer: b is its SENDs, each a length byte then
// that many bytes; Send is always delivered.
type peerMsgs struct{ b []byte }

func (p *peerMsgs) Send([]byte) error { return nil }

func (p *peerMsgs) Recv() ([]byte, error) {
	if len(p.b) == 0 {
		return nil, io.EOF
	}
	n := int(p.b[0])
	p.b = p.b[1:]
	if n > len(p.b) {
		n = len(p.b)
	}
	m := p.b[:n]
	p.b = p.b[n:]
	return m, nil
}

// frameMsgs joins messages in peerMsgs's framing.
func frameMsgs(msgs [][]byte) []byte {
	var b []byte
	for _, m := range msgs {
		if len(m) > 255 {
			continue
		}
		b = append(append(b, byte(len(m))), m...)
	}
	return b
}

// perftestExchangeSeeds returns the seed inputs: every TCP payload of the
// captures' exchanges, each side's whole stream, the rdma_cm mode's SENDs
// (framed), and tbrdma's own messages.
func perftestExchangeSeeds(tb testing.TB) [][]byte {
	var seeds [][]byte
	for _, name := range []string{"write_bw_4k.pcap", "read_lat.pcap", "ud_pingpong.pcap", "rc_pingpong.pcap", "send_bw_ud.pcap"} {
		streams := map[string][]byte{}
		for _, s := range capturePayloads(tb, name) {
			if s.udp {
				continue
			}
			seeds = append(seeds, s.data)
			streams[s.src] = append(streams[s.src], s.data...)
		}
		for _, st := range streams {
			seeds = append(seeds, st)
		}
	}
	// rdma_cm mode: the SEND Only payloads on the comm QP, per sender.
	cm := map[string][][]byte{}
	for _, s := range capturePayloads(tb, "write_bw_rdma_cm.pcap") {
		if !s.udp || len(s.data) < 12+4 || s.data[0] != 0x04 { // RC SEND_ONLY
			continue
		}
		pad := int(s.data[1]>>4) & 3
		m := s.data[12 : len(s.data)-4-pad]
		seeds = append(seeds, m)
		cm[s.src] = append(cm[s.src], m)
	}
	for _, msgs := range cm {
		seeds = append(seeds, frameMsgs(msgs))
	}
	// tbrdma's own: version with offer and hint marker, hint, keys.
	hinted := []byte("6.06\x00tbseg=60\x00tq")
	seeds = append(seeds,
		hinted,
		[]byte("6.06\x00tbseg=8\x00\x00\x00th\x00\x05hello"),
		append([]byte("done\x00"), 0, 4, 'r', 'e', 'a', 'd'),
		Dest{LID: 1, QPN: 0xFFFFFF, PSN: 1, RKey: 0xFFFFFFFF, VAddr: ^uint64(0), SRQN: 7}.MarshalKey(),
		Dest{QPN: 0x12, GID: [16]byte{15: 1}, GIDIndex: 3}.MarshalBinaryKey(),
		PingpongDest{LID: 0xFFFF, QPN: 0xFFFFFF, PSN: 0xFFFFFF, GID: [16]byte{0: 0xfe, 1: 0x80, 15: 1}}.Marshal(),
		frameMsgs([][]byte{hinted, {0, 0, 16, 0}, {0, 0, 0, 64}, {'5', 0}, Dest{QPN: 0x12}.MarshalBinaryKey()}),
	)
	return seeds
}

// capSegment is one payload of a capture: TCP, or UDP (the RoCEv2 packet).
type capSegment struct {
	src  string
	udp  bool
	data []byte
}

// capturePayloads returns the non-empty TCP and UDP payloads of an
// Ethernet/IPv4 capture in testdata/rxe, nil when it is not there.
func capturePayloads(tb testing.TB, name string) []capSegment {
	fh, err := os.Open(filepath.Join(rxeDir, name))
	if err != nil {
		tb.Logf("seed capture not available: %v", err)
		return nil
	}
	defer fh.Close()
	r, err := sniff.NewReader(fh)
	if err != nil {
		tb.Fatalf("%s: %v", name, err)
	}
	var out []capSegment
	for {
		p, err := r.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			tb.Fatalf("%s: %v", name, err)
		}
		b := p.Data
		if len(b) < 14+20 || binary.BigEndian.Uint16(b[12:]) != 0x0800 {
			continue
		}
		ip := b[14:]
		ihl, total := int(ip[0]&15)*4, int(binary.BigEndian.Uint16(ip[2:]))
		if total > len(ip) || ihl < 20 || total < ihl {
			continue
		}
		src := string(ip[12:16])
		l4 := ip[ihl:total]
		switch ip[9] {
		case 6:
			if len(l4) < 20 {
				continue
			}
			if off := int(l4[12]>>4) * 4; len(l4) > off {
				out = append(out, capSegment{src: src, data: bytes.Clone(l4[off:])})
			}
		case 17:
			if len(l4) > 8 && binary.BigEndian.Uint16(l4[2:]) == 4791 {
				out = append(out, capSegment{src: src, udp: true, data: bytes.Clone(l4[8:])})
			}
		}
	}
}
