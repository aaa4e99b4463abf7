package discovery

import (
	"context"
	"log/slog"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// Message-level checks of what Bonjour (mDNSResponder) browsers and
// responders rely on; there is no macOS here to try them against.

// TestAnnouncement: unsolicited responses carry every record, ID 0, QR and
// AA set, no question; cache-flush on the unique records (SRV, TXT, A,
// AAAA) only; TTL 120 s for host records, 4500 s for PTR and TXT; a
// goodbye is the same with TTL 0.
func TestAnnouncement(t *testing.T) {
	z := testZone(t, "lab")
	for _, bye := range []bool{false, true} {
		b, err := announcement(z, bye)
		if err != nil {
			t.Fatal(err)
		}
		m, err := unpack(b)
		if err != nil {
			t.Fatal(err)
		}
		if m.Id != 0 || !m.Response || !m.Authoritative || len(m.Question) != 0 || m.Opcode != 0 || m.Rcode != 0 {
			t.Errorf("goodbye %v: header %+v", bye, m.MsgHdr)
		}
		types := map[uint16]int{}
		for _, rr := range m.Answer {
			h := rr.Header()
			types[h.Rrtype]++
			unique := h.Rrtype != dns.TypePTR
			wantTTL := uint32(4500)
			if h.Rrtype == dns.TypeSRV || h.Rrtype == dns.TypeA || h.Rrtype == dns.TypeAAAA {
				wantTTL = 120
			}
			if bye {
				wantTTL = 0
			}
			if (h.Class&cacheFlush != 0) != unique || h.Class&^cacheFlush != dns.ClassINET || h.Ttl != wantTTL {
				t.Errorf("goodbye %v: %v: class %#x ttl %d, want cache-flush %v ttl %d", bye, rr, h.Class, h.Ttl, unique, wantTTL)
			}
		}
		// Two PTRs: the service's and the service type enumeration's.
		if types[dns.TypePTR] != 2 || types[dns.TypeSRV] != 1 || types[dns.TypeTXT] != 1 || types[dns.TypeA] != 1 || types[dns.TypeAAAA] != 1 {
			t.Errorf("goodbye %v: record types %v", bye, types)
		}
	}
}

// TestProbeMessage: a probe asks ANY for the instance and host names with
// multicast (QM) questions, and carries the proposed unique records in
// the authority section without cache-flush bits (RFC 6762 §8.1, §10.2).
func TestProbeMessage(t *testing.T) {
	z := testZone(t, "lab")
	b, err := probe(z)
	if err != nil {
		t.Fatal(err)
	}
	m, err := unpack(b)
	if err != nil {
		t.Fatal(err)
	}
	if m.Response || m.Id != 0 || len(m.Question) != 2 || len(m.Answer) != 0 || len(m.Ns) != 4 {
		t.Fatalf("probe %v", m)
	}
	for i, name := range []string{z.instance, z.host} {
		q := m.Question[i]
		if q.Name != name || q.Qtype != dns.TypeANY || q.Qclass != dns.ClassINET {
			t.Errorf("question %v, want %s ANY IN (QM)", q, name)
		}
	}
	for _, rr := range m.Ns {
		if h := rr.Header(); h.Class != dns.ClassINET || h.Rrtype == dns.TypePTR || !z.owns(h.Name) {
			t.Errorf("authority record %v", rr)
		}
	}
}

// TestQU: a question with the unicast-response bit is answered by unicast
// to the querier only when the records were multicast on that interface
// within a quarter of their TTL; otherwise, and for QM questions, by
// multicast (RFC 6762 §5.4).
func TestQU(t *testing.T) {
	z := testZone(t, "lab")
	now := t0
	var mu sync.Mutex
	var sent []netip.AddrPort
	r := &responder{zones: map[int]*zone{testIfIndex: z}, log: slog.New(slog.DiscardHandler),
		now: func() time.Time { return now },
		send: func(_ int, _ []byte, to netip.AddrPort) {
			mu.Lock()
			defer mu.Unlock()
			sent = append(sent, to)
		}}
	ask := func(qu bool) netip.AddrPort {
		t.Helper()
		q := new(dns.Msg)
		q.SetQuestion(z.instance, dns.TypeSRV)
		q.Id = 0
		if qu {
			q.Question[0].Qclass |= cacheFlush
		}
		mu.Lock()
		sent = nil
		mu.Unlock()
		r.handle(packet{pack(t, q), peerAddr, testIfIndex})
		mu.Lock()
		defer mu.Unlock()
		if len(sent) != 1 {
			t.Fatalf("%d answers, want 1", len(sent))
		}
		return sent[0]
	}
	if to := ask(true); to.IsValid() {
		t.Errorf("QU, never multicast: answered to %v, want multicast", to)
	}
	if to := ask(true); to != peerAddr {
		t.Errorf("QU, just multicast: answered to %v, want unicast to %v", to, peerAddr)
	}
	if to := ask(false); to.IsValid() {
		t.Errorf("QM: answered to %v, want multicast", to)
	}
	now = now.Add(HostTTL/4 + time.Second) // SRV: 120 s TTL
	if to := ask(true); to.IsValid() {
		t.Errorf("QU, multicast more than TTL/4 ago: answered to %v, want multicast", to)
	}
}

// TestKnownAnswerTTL: a known answer suppresses ours only while it holds
// at least half our TTL (RFC 6762 §7.1).
func TestKnownAnswerTTL(t *testing.T) {
	z := testZone(t, "lab")
	out := make(chan netip.AddrPort, 4)
	r := &responder{zones: map[int]*zone{testIfIndex: z}, log: slog.New(slog.DiscardHandler),
		send: func(_ int, _ []byte, to netip.AddrPort) { out <- to }}
	srv := z.records(z.instance, dns.TypeSRV)[0]
	for _, c := range []struct {
		ttl      uint32
		answered bool
	}{{120, false}, {60, false}, {59, true}} {
		q := new(dns.Msg)
		q.SetQuestion(z.instance, dns.TypeSRV)
		known := dns.Copy(srv)
		known.Header().Ttl, known.Header().Class = c.ttl, dns.ClassINET
		q.Answer = []dns.RR{known}
		r.handle(packet{pack(t, q), peerAddr, testIfIndex})
		got := len(out) > 0 // unique records are answered at once
		for len(out) > 0 {
			<-out
		}
		if got != c.answered {
			t.Errorf("known answer with TTL %d: answered %v, want %v", c.ttl, got, c.answered)
		}
	}
}

// TestTieBreak: a probe for our instance name from another host, seen
// while we probe, is compared with our proposal (RFC 6762 §8.2): a later
// one wins (we lost), an earlier one loses, an identical one (our own,
// looped back) is no conflict.
func TestTieBreak(t *testing.T) {
	txt, err := encodeTXT(testService("lab").txt())
	if err != nil {
		t.Fatal(err)
	}
	other := func(port uint16, host string) []byte {
		z, err := newZone("lab", host, port, []netip.Addr{netip.MustParseAddr("198.18.0.9")}, txt)
		if err != nil {
			t.Fatal(err)
		}
		b, err := probe(z)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, c := range []struct {
		what string
		pkt  []byte
		lost bool
	}{
		{"later port", other(4792, "other-tbrdma"), true},
		{"earlier port", other(4790, "other-tbrdma"), false},
		{"own probe", mustProbe(t, testZone(t, "lab")), false},
	} {
		r := &responder{zones: map[int]*zone{testIfIndex: testZone(t, "lab")}, log: slog.New(slog.DiscardHandler),
			send: func(int, []byte, netip.AddrPort) {}, probing: true}
		r.handle(packet{c.pkt, peerAddr, testIfIndex})
		if r.lost != c.lost || r.instanceConflict || r.hostConflict {
			t.Errorf("%s: lost %v conflict %v/%v, want lost %v", c.what, r.lost, r.instanceConflict, r.hostConflict, c.lost)
		}
	}
	// A higher host address wins the host name.
	r := &responder{zones: map[int]*zone{testIfIndex: testZone(t, "lab")}, log: slog.New(slog.DiscardHandler),
		send: func(int, []byte, netip.AddrPort) {}, probing: true}
	z, err := newZone("other", "peer-tbrdma", 4791, []netip.Addr{netip.MustParseAddr("198.18.0.200")}, txt)
	if err != nil {
		t.Fatal(err)
	}
	r.handle(packet{mustProbe(t, z), peerAddr, testIfIndex})
	if !r.lost {
		t.Error("host name: a later address set did not win")
	}

	// The ordering rules themselves.
	a := &dns.A{Hdr: dns.RR_Header{Name: "h.local.", Rrtype: dns.TypeA, Class: dns.ClassINET}, A: netip.MustParseAddr("198.18.0.1").AsSlice()}
	a2 := &dns.A{Hdr: dns.RR_Header{Name: "h.local.", Rrtype: dns.TypeA, Class: dns.ClassINET | cacheFlush}, A: netip.MustParseAddr("198.18.0.2").AsSlice()}
	aaaa := &dns.AAAA{Hdr: dns.RR_Header{Name: "h.local.", Rrtype: dns.TypeAAAA, Class: dns.ClassINET}, AAAA: netip.MustParseAddr("fe80::1").AsSlice()}
	for _, c := range []struct {
		x, y []dns.RR
		want int
	}{
		{[]dns.RR{a}, []dns.RR{a2}, -1},           // rdata; the cache-flush bit does not count
		{[]dns.RR{a2}, []dns.RR{a}, 1},            //
		{[]dns.RR{aaaa}, []dns.RR{a2}, 1},         // type before rdata
		{[]dns.RR{a}, []dns.RR{a, aaaa}, -1},      // a prefix is earlier
		{[]dns.RR{aaaa, a}, []dns.RR{a, aaaa}, 0}, // sorted first
	} {
		if got := compareProbeSets(c.x, c.y); (got > 0) != (c.want > 0) || (got < 0) != (c.want < 0) {
			t.Errorf("compare %v with %v: %d, want sign of %d", c.x, c.y, got, c.want)
		}
	}
}

func mustProbe(t *testing.T, z *zone) []byte {
	t.Helper()
	b, err := probe(z)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestAddressGoodbye: after an address change, the records of addresses
// that are gone are sent with TTL 0 (and their cache-flush bit); nothing
// when no address went.
func TestAddressGoodbye(t *testing.T) {
	z := testZone(t, "lab") // 198.18.0.3, fe80::2
	b, err := addressGoodbye(z, []netip.Addr{netip.MustParseAddr("198.18.0.9"), netip.MustParseAddr("fe80::2")})
	if err != nil {
		t.Fatal(err)
	}
	m, err := unpack(b)
	if err != nil {
		t.Fatal(err)
	}
	if !m.Response || len(m.Answer) != 1 {
		t.Fatalf("goodbye %v", m)
	}
	a, ok := m.Answer[0].(*dns.A)
	if !ok || a.Hdr.Ttl != 0 || a.Hdr.Class != dns.ClassINET|cacheFlush || a.A.String() != "198.18.0.3" {
		t.Errorf("goodbye record %v", m.Answer[0])
	}
	if b, err := addressGoodbye(z, []netip.Addr{netip.MustParseAddr("198.18.0.3"), netip.MustParseAddr("fe80::2")}); b != nil || err != nil {
		t.Errorf("no address gone: %x %v", b, err)
	}
}

// TestSimultaneousProbe: two advertisers start at once with the same
// instance name (different data, different host names) on one link; the
// tie-break leaves the name to the later data (the higher SRV port) and
// renames the other "name (2)".
func TestSimultaneousProbe(t *testing.T) {
	if testing.Short() {
		t.Skip("uses multicast sockets")
	}
	iface := testIface(t)
	name := "tie-" + uniq()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	advs := make([]*Advertiser, 2)
	errs := make([]error, 2)
	start := make(chan struct{})
	for i := range advs {
		wg.Go(func() {
			s := testService(name)
			s.Port = 4791 + uint16(i)
			<-start
			advs[i], errs[i] = Advertise(ctx, s, testOptions(t, iface))
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("advertiser %d: %v", i, err)
		}
		defer advs[i].Close()
	}
	t.Logf("port 4791 named %q, port 4792 named %q", advs[0].Name(), advs[1].Name())
	if advs[1].Name() != name || advs[0].Name() != name+" (2)" {
		t.Errorf("names %q (port 4791) and %q (port 4792), want %q and %q",
			advs[0].Name(), advs[1].Name(), name+" (2)", name)
	}
	peers, err := Browse(ctx, &Options{Interfaces: []string{iface}})
	if err != nil {
		t.Fatal(err)
	}
	for i, a := range advs {
		if p, ok := find(peers, a.Name()); !ok || p.Port != 4791+uint16(i) {
			t.Errorf("Browse: %q port %d not found in %v", a.Name(), 4791+i, peers)
		}
	}
}
