package discovery

import (
	"flag"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

var updateCorpus = flag.Bool("update-corpus", false, "rewrite testdata/fuzz seed corpora")

var (
	peerAddr  = netip.MustParseAddrPort("198.18.0.3:5353")
	peerAddr6 = netip.MustParseAddrPort("[fe80::2%tb0]:5353")
	t0        = time.Unix(1_700_000_000, 0)
)

const testIfIndex = 7

func testZone(t testing.TB, instance string) *zone {
	txt, err := encodeTXT(testService(instance).txt())
	if err != nil {
		t.Fatal(err)
	}
	z, err := newZone(instance, "peer-tbrdma", 4791,
		[]netip.Addr{netip.MustParseAddr("198.18.0.3"), netip.MustParseAddr("fe80::2")}, txt)
	if err != nil {
		t.Fatal(err)
	}
	return z
}

func pack(t testing.TB, m *dns.Msg) []byte {
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func newTestBrowser() *browser {
	return newBrowser(map[int]string{testIfIndex: "tb0"}, slog.New(slog.DiscardHandler))
}

// TestZoneAnswer checks sections, TTLs and cache-flush bits.
func TestZoneAnswer(t *testing.T) {
	z := testZone(t, "Lab Mac")
	ans, extra := z.answer(dns.Question{Name: "_TBRDMA._udp.local.", Qtype: dns.TypePTR, Qclass: dns.ClassINET})
	if len(ans) != 1 || ans[0].Header().Rrtype != dns.TypePTR || ans[0].(*dns.PTR).Ptr != `Lab Mac._tbrdma._udp.local.` {
		t.Fatalf("answers %v", ans)
	}
	var types []string
	for _, rr := range append(ans, extra...) {
		h := rr.Header()
		types = append(types, dns.TypeToString[h.Rrtype])
		wantTTL, wantFlush := uint32(120), true
		switch h.Rrtype {
		case dns.TypePTR:
			wantTTL, wantFlush = 4500, false
		case dns.TypeTXT:
			wantTTL = 4500
		}
		if h.Ttl != wantTTL || (h.Class&cacheFlush != 0) != wantFlush {
			t.Errorf("%v: ttl %d class %#x, want ttl %d flush %v", rr, h.Ttl, h.Class, wantTTL, wantFlush)
		}
	}
	slices.Sort(types)
	if got := strings.Join(types, ","); got != "A,AAAA,PTR,SRV,TXT" {
		t.Errorf("record types %s", got)
	}
	if a, _ := z.answer(dns.Question{Name: "PEER-tbrdma.local.", Qtype: dns.TypeANY, Qclass: dns.ClassINET}); len(a) != 2 {
		t.Errorf("host ANY: %v", a)
	}
	if a, _ := z.answer(dns.Question{Name: "other._tbrdma._udp.local.", Qtype: dns.TypeANY}); len(a) != 0 {
		t.Errorf("foreign name answered: %v", a)
	}
}

// TestResponder: a multicast query gets a multicast answer with ID 0; a
// legacy query (source port != 5353) a unicast answer echoing ID and
// question with TTL <= 10; a known answer suppresses the PTR.
func TestResponder(t *testing.T) {
	z := testZone(t, "lab")
	type sent struct {
		b  []byte
		to netip.AddrPort
	}
	out := make(chan sent, 10)
	r := &responder{zones: map[int]*zone{testIfIndex: z}, log: slog.New(slog.DiscardHandler),
		send: func(_ int, b []byte, to netip.AddrPort) { out <- sent{b, to} }}
	recv := func() (*dns.Msg, netip.AddrPort) {
		t.Helper()
		select {
		case s := <-out:
			var m dns.Msg
			if err := m.Unpack(s.b); err != nil {
				t.Fatal(err)
			}
			return &m, s.to
		case <-time.After(time.Second):
			t.Fatal("no answer")
		}
		return nil, netip.AddrPort{}
	}

	q := new(dns.Msg)
	q.SetQuestion(instanceFQDN("lab"), dns.TypeSRV)
	q.Id = 0
	r.handle(packet{pack(t, q), peerAddr, testIfIndex})
	m, to := recv()
	if to.IsValid() || m.Id != 0 || !m.Response || !m.Authoritative || len(m.Question) != 0 {
		t.Errorf("multicast answer to %v: %v", to, m)
	}
	if len(m.Answer) != 1 || m.Answer[0].Header().Rrtype != dns.TypeSRV || len(m.Extra) != 3 {
		t.Errorf("SRV answer: %v", m)
	}

	q.Id = 4242
	legacy := netip.MustParseAddrPort("198.18.0.3:40000")
	r.handle(packet{pack(t, q), legacy, testIfIndex})
	m, to = recv()
	if to != legacy || m.Id != 4242 || len(m.Question) != 1 {
		t.Errorf("legacy answer to %v: %v", to, m)
	}
	for _, rr := range append(m.Answer, m.Extra...) {
		if rr.Header().Ttl > 10 || rr.Header().Class&cacheFlush != 0 {
			t.Errorf("legacy answer record %v", rr)
		}
	}

	ptr := new(dns.Msg)
	ptr.SetQuestion(serviceName, dns.TypePTR)
	ptr.Answer = []dns.RR{&dns.PTR{Hdr: dns.RR_Header{Name: serviceName, Rrtype: dns.TypePTR, Class: dns.ClassINET, Ttl: 4000},
		Ptr: instanceFQDN("lab")}}
	r.handle(packet{pack(t, ptr), peerAddr, testIfIndex})
	select {
	case s := <-out:
		t.Errorf("known answer not suppressed: %x", s.b)
	case <-time.After(200 * time.Millisecond):
	}
	ptr.Answer = nil
	r.handle(packet{pack(t, ptr), peerAddr, testIfIndex}) // delayed 20-120 ms
	if m, _ = recv(); len(m.Answer) != 1 || len(m.Extra) != 4 {
		t.Errorf("PTR answer: %v", m)
	}

	r.probing = true
	r.handle(packet{pack(t, q), peerAddr, testIfIndex})
	select {
	case <-out:
		t.Error("answered while probing")
	case <-time.After(50 * time.Millisecond):
	}
}

// response builds a response carrying rrs in the answer section.
func response(t testing.TB, rrs ...dns.RR) []byte {
	m := new(dns.Msg)
	m.Response, m.Authoritative = true, true
	m.Answer = rrs
	return pack(t, m)
}

// TestBrowserMerge: records arriving in separate packets, in answer and
// additional sections, for two instances of one host, are merged; a
// goodbye removes an instance one second later.
func TestBrowserMerge(t *testing.T) {
	za, zb := testZone(t, "alpha"), testZone(t, "beta")
	b := newTestBrowser()
	now := t0

	// Packet 1: the PTR answer of alpha with SRV/TXT only (no addresses).
	var first []dns.RR
	for _, rr := range za.all() {
		if t := rr.Header().Rrtype; t != dns.TypeA && t != dns.TypeAAAA {
			first = append(first, rr)
		}
	}
	b.handle(packet{response(t, first...), peerAddr, testIfIndex}, now)
	if evs := b.update(now); len(evs) != 0 {
		t.Fatalf("incomplete peer reported: %v", evs)
	}
	if !b.incomplete() {
		t.Error("incomplete() = false")
	}
	q := b.query(testIfIndex, now, nil)
	if !slices.ContainsFunc(q.Question, func(q dns.Question) bool { return q.Qtype == dns.TypeAAAA && q.Name == "peer-tbrdma.local." }) {
		t.Errorf("no follow-up address query in %v", q.Question)
	}
	// Packet 2: beta's full announcement, which carries the host's
	// addresses too (in the additional section).
	m := new(dns.Msg)
	m.Response = true
	for _, rr := range zb.all() {
		if rr.Header().Rrtype == dns.TypePTR {
			m.Answer = append(m.Answer, rr)
		} else {
			m.Extra = append(m.Extra, rr)
		}
	}
	now = now.Add(100 * time.Millisecond)
	b.handle(packet{pack(t, m), peerAddr6, testIfIndex}, now)
	evs := b.update(now)
	if len(evs) != 2 || evs[0].Type != Appeared || evs[0].Peer.Name != "alpha" || evs[1].Peer.Name != "beta" {
		t.Fatalf("events %v", evs)
	}
	p := evs[0].Peer
	want := []netip.Addr{netip.MustParseAddr("198.18.0.3"), netip.MustParseAddr("fe80::2%tb0")}
	if !slices.Equal(p.Addrs, want) || p.Port != 4791 || p.Host != "peer-tbrdma.local" || p.Interface != "tb0" || p.TXT["mtu"] != "4096" {
		t.Errorf("peer %+v", p)
	}
	// Known answers: both PTRs.
	if q := b.query(testIfIndex, now, nil); len(q.Answer) != 2 {
		t.Errorf("known answers %v", q.Answer)
	}

	// TXT change of alpha (cache-flush) → Changed after the old one is
	// flushed.
	now = now.Add(2 * time.Second)
	z2, err := newZone("alpha", "peer-tbrdma", 4791, []netip.Addr{netip.MustParseAddr("198.18.0.3")}, []string{"txtvers=1", "mtu=1024"})
	if err != nil {
		t.Fatal(err)
	}
	b.handle(packet{response(t, z2.records(za.instance, dns.TypeTXT)...), peerAddr, testIfIndex}, now)
	now = now.Add(goodbyeDelay + time.Millisecond)
	evs = b.update(now)
	if len(evs) != 1 || evs[0].Type != Changed || evs[0].Peer.TXT["mtu"] != "1024" {
		t.Fatalf("after TXT change: %v", evs)
	}

	// Goodbye of beta.
	bye, err := announcement(zb, true)
	if err != nil {
		t.Fatal(err)
	}
	// Only beta's own records: drop the host addresses from the goodbye
	// (alpha still uses them).
	var bm dns.Msg
	_ = bm.Unpack(bye)
	bm.Answer = slices.DeleteFunc(bm.Answer, func(rr dns.RR) bool {
		t := rr.Header().Rrtype
		return t == dns.TypeA || t == dns.TypeAAAA
	})
	b.handle(packet{pack(t, &bm), peerAddr, testIfIndex}, now)
	if evs := b.update(now); len(evs) != 0 {
		t.Errorf("goodbye acted before one second: %v", evs)
	}
	now = now.Add(goodbyeDelay)
	evs = b.update(now)
	if len(evs) != 1 || evs[0].Type != Left || evs[0].Peer.Name != "beta" {
		t.Fatalf("after goodbye: %v", evs)
	}
	if l := b.list(); len(l) != 1 || l[0].Name != "alpha" {
		t.Errorf("list %v", l)
	}
	// TTL expiry: the host records (120 s) expire and alpha leaves,
	// unless refreshed; a refresh query is due at 80 %.
	if !b.refreshDue(now.Add(97 * time.Second)) {
		t.Error("no refresh due at 80 % of 120 s")
	}
	evs = b.update(now.Add(HostTTL))
	if len(evs) != 1 || evs[0].Type != Left {
		t.Errorf("after expiry: %v", evs)
	}
}

// TestBrowserIgnores: queries, wrong ports, other interfaces, non-zero
// rcode, and malformed packets change nothing.
func TestBrowserIgnores(t *testing.T) {
	z := testZone(t, "alpha")
	good := response(t, z.all()...)
	b := newTestBrowser()
	b.handle(packet{good, netip.MustParseAddrPort("198.18.0.3:1234"), testIfIndex}, t0)
	b.handle(packet{good, peerAddr, testIfIndex + 1}, t0)
	var m dns.Msg
	_ = m.Unpack(good)
	m.Rcode = dns.RcodeServerFailure
	b.handle(packet{pack(t, &m), peerAddr, testIfIndex}, t0)
	for i := range good {
		b.handle(packet{good[:i], peerAddr, testIfIndex}, t0)
	}
	if evs := b.update(t0); len(evs) != 0 {
		t.Errorf("events %v", evs)
	}
	b.handle(packet{good, peerAddr, testIfIndex}, t0)
	if evs := b.update(t0); len(evs) != 1 {
		t.Errorf("good packet: %v", evs)
	}
}

// FuzzMessage feeds arbitrary datagrams to the responder and the browser
// (the two handlers of received mDNS packets): never a panic, and what the
// browser builds from them still packs.
func FuzzMessage(f *testing.F) {
	for _, s := range messageSeeds(f) {
		f.Add(s)
	}
	z := testZone(f, "lab")
	f.Fuzz(func(t *testing.T, data []byte) {
		r := &responder{zones: map[int]*zone{testIfIndex: z}, log: slog.New(slog.DiscardHandler),
			send: func(int, []byte, netip.AddrPort) {}}
		r.handle(packet{data, peerAddr, testIfIndex})
		r.handle(packet{data, netip.MustParseAddrPort("198.18.0.3:1234"), testIfIndex})
		r.probing = true
		r.handle(packet{data, peerAddr, testIfIndex})

		b := newTestBrowser()
		b.handle(packet{data, peerAddr, testIfIndex}, t0)
		b.update(t0)
		for _, p := range b.list() {
			if p.Name == "" || len(p.Addrs) == 0 {
				t.Fatalf("incomplete peer %+v", p)
			}
		}
		if _, err := b.query(testIfIndex, t0, []string{"x._tbrdma._udp.local."}).Pack(); err != nil {
			t.Fatalf("query does not pack: %v", err)
		}
		b.update(t0.Add(2 * OtherTTL))
		if len(b.entries) != 0 {
			t.Fatalf("%d records outlived every TTL", len(b.entries))
		}
	})
}

// messageSeeds returns valid mDNS messages: announcement, goodbye, probe,
// query with known answers, legacy query, a response in two parts.
func messageSeeds(t testing.TB) [][]byte {
	z := testZone(t, "Lab Mac.2")
	var seeds [][]byte
	for _, bye := range []bool{false, true} {
		b, err := announcement(z, bye)
		if err != nil {
			t.Fatal(err)
		}
		seeds = append(seeds, b)
	}
	p, err := probe(z)
	if err != nil {
		t.Fatal(err)
	}
	seeds = append(seeds, p)
	// A rival probe for the fuzzed responder's own instance name "lab"
	// (the §8.2 tie-break path).
	txt, err := encodeTXT(testService("lab").txt())
	if err != nil {
		t.Fatal(err)
	}
	rival, err := newZone("lab", "other-tbrdma", 4792, []netip.Addr{netip.MustParseAddr("198.18.0.9")}, txt)
	if err != nil {
		t.Fatal(err)
	}
	if p, err = probe(rival); err != nil {
		t.Fatal(err)
	}
	seeds = append(seeds, p)
	br := newTestBrowser()
	br.handle(packet{seeds[0], peerAddr, testIfIndex}, t0)
	seeds = append(seeds, pack(t, br.query(testIfIndex, t0, []string{instanceFQDN("lab")})))
	q := new(dns.Msg)
	q.SetQuestion(instanceFQDN("lab"), dns.TypeANY)
	q.Id = 4242 // SetQuestion draws a random ID; the seed stays fixed
	seeds = append(seeds, pack(t, q))
	a, x := z.answer(dns.Question{Name: serviceName, Qtype: dns.TypePTR, Qclass: dns.ClassINET})
	seeds = append(seeds, response(t, a...), response(t, x...))
	return seeds
}

// TestFuzzCorpus keeps testdata/fuzz in step with the seeds (run with
// -update-corpus to rewrite it).
func TestFuzzCorpus(t *testing.T) {
	corpora := map[string][][]byte{
		"FuzzMessage": messageSeeds(t),
		"FuzzTXT": {
			[]byte("\x09txtvers=1\x15gid=::ffff:198.18.0.2\x08mtu=4096\x0bdev=tbrdma0\x04flag\x06empty="),
			[]byte("\x05K=a=b\x05k=dup\x02=v\x03\x01=x"),
			[]byte("\x00"),
			[]byte("\x03k=\\\x06b=\x00\x01\xff\""),
		},
	}
	for name, seeds := range corpora {
		dir := filepath.Join("testdata", "fuzz", name)
		for i, s := range seeds {
			file := filepath.Join(dir, fmt.Sprintf("seed-%02d", i))
			content := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", s)
			if *updateCorpus {
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(file, []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
				continue
			}
			got, err := os.ReadFile(file)
			if err != nil {
				t.Fatalf("%v (run go test -run TestFuzzCorpus -update-corpus)", err)
			}
			// Seeds with random parts (none now) would differ; compare
			// only that the file parses as a corpus entry.
			if !strings.HasPrefix(string(got), "go test fuzz v1\n[]byte(") {
				t.Errorf("%s: not a corpus file", file)
			}
		}
	}
}
