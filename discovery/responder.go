package discovery

import (
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/miekg/dns"
)

// Timing of RFC 6762 §8 and §6.
const (
	probeInterval    = 250 * time.Millisecond
	probeCount       = 3
	announceInterval = time.Second
	announceCount    = 3
	maxConflicts     = 10
	legacyTTL        = 10 // s, cap for answers to legacy unicast queries (§6.7)
)

// sender sends one packed message on the link of interface ifIndex, to the
// groups (to invalid) or to a unicast address.
type sender func(ifIndex int, b []byte, to netip.AddrPort)

// responder answers queries for the zones of one Advertiser. It holds no
// sockets: handle parses a datagram and calls send. It is used from one
// goroutine at a time, except that delayed answers call send later.
type responder struct {
	zones map[int]*zone // by interface index
	send  sender
	log   *slog.Logger
	// probing is true until probing finished; a conflicting answer seen
	// meanwhile sets instanceConflict or hostConflict, a simultaneous
	// probe for one of our names that wins the tie-break sets lost.
	probing          bool
	instanceConflict bool
	hostConflict     bool
	lost             bool
	// multicast holds when each record was last multicast on each
	// interface, for answering QU questions (RFC 6762 §5.4).
	multicast map[mcastKey]time.Time
	now       func() time.Time // time.Now; tests replace it
}

type mcastKey struct {
	ifIndex int
	name    string // lowercased
	rrtype  uint16
	rdata   string
}

func (r *responder) clock() time.Time {
	if r.now != nil {
		return r.now()
	}
	return time.Now()
}

// noteMulticast records that rrs were multicast on an interface now.
func (r *responder) noteMulticast(ifIndex int, rrs []dns.RR) {
	if r.multicast == nil {
		r.multicast = make(map[mcastKey]time.Time)
	}
	now := r.clock()
	for _, rr := range rrs {
		h := rr.Header()
		r.multicast[mcastKey{ifIndex, strings.ToLower(h.Name), h.Rrtype, rdataKey(rr)}] = now
	}
}

// multicastRecently reports whether every record of rrs was multicast on
// the interface within a quarter of its TTL (RFC 6762 §5.4).
func (r *responder) multicastRecently(ifIndex int, rrs []dns.RR) bool {
	now := r.clock()
	for _, rr := range rrs {
		h := rr.Header()
		t, ok := r.multicast[mcastKey{ifIndex, strings.ToLower(h.Name), h.Rrtype, rdataKey(rr)}]
		if !ok || now.Sub(t) > time.Duration(h.Ttl)*time.Second/4 {
			return false
		}
	}
	return true
}

// handle processes one received datagram.
func (r *responder) handle(p packet) {
	z := r.zones[p.ifIndex]
	if z == nil {
		return
	}
	m, err := unpack(p.data)
	if err != nil {
		r.log.Debug("malformed mdns packet", "from", p.from, "err", err)
		return
	}
	// RFC 6762 §18.3, §18.11: non-zero opcode or rcode is silently ignored.
	if m.Opcode != dns.OpcodeQuery || m.Rcode != dns.RcodeSuccess {
		return
	}
	if m.Response {
		r.checkConflict(z, m)
		return
	}
	if r.probing {
		r.tieBreak(z, m)
		return // RFC 6762 §8.1: no answers before probing completes
	}
	r.answer(z, m, p)
}

// checkConflict looks, while probing, for someone else answering with one
// of our unique names and different data (RFC 6762 §8.1, §9).
func (r *responder) checkConflict(z *zone, m *dns.Msg) {
	if !r.probing {
		return
	}
	ours := z.probeRecords()
	for _, rr := range append(m.Answer, m.Extra...) {
		h := rr.Header()
		if h.Ttl == 0 || !z.owns(h.Name) {
			continue
		}
		same := false
		for _, o := range ours {
			if sameRecord(rr, o) {
				same = true
				break
			}
		}
		// Another address record for our host name that matches one of
		// ours is our own (or our process's) announcement.
		if !same && !r.oursOtherType(ours, rr) {
			r.log.Info("mdns name conflict", "name", h.Name, "record", rr.String())
			if strings.EqualFold(h.Name, z.host) {
				r.hostConflict = true
			} else {
				r.instanceConflict = true
			}
		}
	}
}

// tieBreak handles a probe from another host for one of our names while
// we probe (RFC 6762 §8.2): the records each side proposes (the authority
// section) are compared lexicographically; if ours are earlier we lost,
// and must wait a second and probe again (by then the winner defends its
// name and we rename). Identical sets (our own probe, looped back) are
// no conflict.
func (r *responder) tieBreak(z *zone, m *dns.Msg) {
	if len(m.Ns) == 0 {
		return
	}
	ours := z.probeRecords()
	for _, name := range []string{z.instance, z.host} {
		var theirs, mine []dns.RR
		for _, rr := range m.Ns {
			if strings.EqualFold(rr.Header().Name, name) {
				theirs = append(theirs, rr)
			}
		}
		if len(theirs) == 0 {
			continue
		}
		for _, rr := range ours {
			if strings.EqualFold(rr.Header().Name, name) {
				mine = append(mine, rr)
			}
		}
		if compareProbeSets(mine, theirs) < 0 {
			r.log.Info("mdns simultaneous probe lost the tie-break", "name", name)
			r.lost = true
		}
	}
}

// compareProbeSets compares two sets of proposed records as RFC 6762
// §8.2.1 says: each sorted by class (without the cache-flush bit), type
// and raw uncompressed rdata; then compared record by record; when one is
// a prefix of the other, the longer set is later.
func compareProbeSets(a, b []dns.RR) int {
	ka, kb := probeKeys(a), probeKeys(b)
	for i := range min(len(ka), len(kb)) {
		if c := strings.Compare(ka[i], kb[i]); c != 0 {
			return c
		}
	}
	return len(ka) - len(kb)
}

// probeKeys returns, sorted, a byte string per record that compares as
// §8.2 orders records: class, type, rdata.
func probeKeys(rrs []dns.RR) []string {
	out := make([]string, 0, len(rrs))
	for _, rr := range rrs {
		h := rr.Header()
		k := []byte{byte(h.Class >> 8 & 0x7f), byte(h.Class), byte(h.Rrtype >> 8), byte(h.Rrtype)}
		out = append(out, string(append(k, rawRdata(rr)...)))
	}
	slices.Sort(out)
	return out
}

// rawRdata returns the uncompressed wire form of rr's data; nil if it
// cannot be packed.
func rawRdata(rr dns.RR) []byte {
	buf := make([]byte, dns.Len(rr)+512)
	end, err := dns.PackRR(rr, buf, 0, nil, false)
	if err != nil {
		return nil
	}
	hdr, err := dns.PackDomainName(dns.Fqdn(rr.Header().Name), buf[end:], 0, nil, false)
	if err != nil || hdr+10 > end {
		return nil
	}
	return buf[hdr+10 : end]
}

// oursOtherType reports whether rr is a record type we publish for that
// name with several values (A/AAAA): another process of ours on the same
// host may publish another address set; only a different SRV or TXT, or
// an address for a name we did not choose, is a conflict.
func (r *responder) oursOtherType(ours []dns.RR, rr dns.RR) bool {
	t := rr.Header().Rrtype
	if t != dns.TypeA && t != dns.TypeAAAA {
		return false
	}
	for _, o := range ours {
		if o.Header().Rrtype == t && strings.EqualFold(o.Header().Name, rr.Header().Name) {
			return false
		}
	}
	return true
}

// sameRecord compares name, type and rdata, ignoring TTL and the
// cache-flush bit.
func sameRecord(a, b dns.RR) bool {
	ha, hb := a.Header(), b.Header()
	if ha.Rrtype != hb.Rrtype || !strings.EqualFold(ha.Name, hb.Name) {
		return false
	}
	return rdataKey(a) == rdataKey(b)
}

// answer builds and sends the response to a query (RFC 6762 §6).
func (r *responder) answer(z *zone, q *dns.Msg, p packet) {
	legacy := p.from.Port() != mdnsPort // one-shot query (§5.1, §6.7)
	var ans, extra []dns.RR
	shared := false
	// unicast: every question asked for a unicast response (QU, §5.4).
	unicast := len(q.Question) > 0
	for _, qu := range q.Question {
		if qu.Qclass&^cacheFlush != dns.ClassINET && qu.Qclass&^cacheFlush != dns.ClassANY {
			continue
		}
		if qu.Qclass&cacheFlush == 0 {
			unicast = false
		}
		a, x := z.answer(qu)
		for _, rr := range a {
			if knownAnswer(q.Answer, rr) {
				continue // known-answer suppression (§7.1)
			}
			if rr.Header().Rrtype == dns.TypePTR {
				shared = true
			}
			ans = append(ans, rr)
		}
		extra = append(extra, x...)
	}
	if len(ans) == 0 {
		return
	}
	// Additional records already in the answer section are left out.
	var ex []dns.RR
	for _, rr := range dedupe(extra) {
		dup := false
		for _, a := range ans {
			if dns.IsDuplicate(a, rr) {
				dup = true
				break
			}
		}
		if !dup {
			ex = append(ex, rr)
		}
	}
	resp := new(dns.Msg)
	resp.Response = true
	resp.Authoritative = true
	resp.Answer = ans
	resp.Extra = ex
	to := netip.AddrPort{} // multicast
	// A QU question gets a unicast answer, unless the records were not
	// multicast within a quarter of their TTL: then everyone's cache
	// gets them (§5.4).
	if unicast && !legacy && r.multicastRecently(p.ifIndex, append(ans, ex...)) {
		to = p.from
	}
	if legacy {
		resp.Id = q.Id
		resp.Question = q.Question
		for _, rr := range append(resp.Answer, resp.Extra...) {
			h := rr.Header()
			h.Class &^= cacheFlush
			h.Ttl = min(h.Ttl, legacyTTL)
		}
		to = p.from
	}
	b, err := resp.Pack()
	if err != nil {
		r.log.Warn("pack mdns response", "err", err)
		return
	}
	if !to.IsValid() {
		r.noteMulticast(p.ifIndex, append(ans, ex...))
	}
	if shared && !to.IsValid() {
		// Shared records: random 20-120 ms delay (§6).
		d := 20*time.Millisecond + rand.N(100*time.Millisecond)
		time.AfterFunc(d, func() { r.send(p.ifIndex, b, to) })
		return
	}
	r.send(p.ifIndex, b, to)
}

// knownAnswer reports whether the querier already holds rr with at least
// half its TTL left.
func knownAnswer(known []dns.RR, rr dns.RR) bool {
	for _, k := range known {
		if sameRecord(k, rr) && k.Header().Ttl >= rr.Header().Ttl/2 {
			return true
		}
	}
	return false
}

// probe returns a probe query for z (RFC 6762 §8.1): ANY questions for
// the instance and host names, the proposed records in the authority
// section. The questions ask for multicast answers (QM), also in the
// first probe where §8.1 suggests QU: on Linux our sockets bind the group
// address and would never receive a unicast answer, so a defending
// host's unicast reply would go unseen.
func probe(z *zone) ([]byte, error) {
	m := new(dns.Msg)
	class := uint16(dns.ClassINET)
	m.Question = []dns.Question{
		{Name: z.instance, Qtype: dns.TypeANY, Qclass: class},
		{Name: z.host, Qtype: dns.TypeANY, Qclass: class},
	}
	for _, rr := range z.probeRecords() {
		rr.Header().Class &^= cacheFlush
		m.Ns = append(m.Ns, rr)
	}
	return m.Pack()
}

// announcement returns an unsolicited response with all of z's records,
// with TTL 0 for a goodbye (RFC 6762 §8.3, §10.1).
func announcement(z *zone, goodbye bool) ([]byte, error) {
	m := new(dns.Msg)
	m.Response = true
	m.Authoritative = true
	m.Answer = z.all()
	if goodbye {
		for _, rr := range m.Answer {
			rr.Header().Ttl = 0
		}
	}
	return m.Pack()
}
