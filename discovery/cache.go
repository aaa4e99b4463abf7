package discovery

import (
	"cmp"
	"log/slog"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/miekg/dns"
)

// maxCache bounds the record cache; records past it are dropped (a
// Thunderbolt link carries few).
const maxCache = 4096

// goodbyeDelay is how long a record announced with TTL 0, or flushed by a
// cache-flush record, is kept (RFC 6762 §10.1, §10.2).
const goodbyeDelay = time.Second

type cacheKey struct {
	ifIndex int
	name    string // lowercased
	rrtype  uint16
	rdata   string
}

type cacheEntry struct {
	rr        dns.RR
	received  time.Time
	expires   time.Time
	refreshed int // refresh queries sent for this record (at 80 % and 90 % of its TTL)
}

type peerKey struct {
	ifIndex  int
	instance string // lowercased presentation form
}

// browser is the querier's state: a cache of every record from every
// response, merged, and the peers assembled from it. It does no I/O and
// takes the time as an argument.
type browser struct {
	log     *slog.Logger
	ifNames map[int]string
	entries map[cacheKey]*cacheEntry
	peers   map[peerKey]Peer
}

func newBrowser(ifNames map[int]string, log *slog.Logger) *browser {
	return &browser{log: log, ifNames: ifNames, entries: make(map[cacheKey]*cacheEntry), peers: make(map[peerKey]Peer)}
}

// rdataKey is a comparable rendering of the data of the record types the
// cache keeps; "" for the others.
func rdataKey(rr dns.RR) string {
	switch rr := rr.(type) {
	case *dns.PTR:
		return strings.ToLower(rr.Ptr)
	case *dns.SRV:
		return strings.ToLower(rr.Target) + " " + strconv.Itoa(int(rr.Port)) + " " +
			strconv.Itoa(int(rr.Priority)) + " " + strconv.Itoa(int(rr.Weight))
	case *dns.TXT:
		return strings.Join(rr.Txt, "\x00")
	case *dns.A:
		if a, ok := netip.AddrFromSlice(rr.A); ok {
			return a.Unmap().String()
		}
	case *dns.AAAA:
		if a, ok := netip.AddrFromSlice(rr.AAAA); ok {
			return a.String()
		}
	}
	return ""
}

// handle merges the records of one received datagram.
func (b *browser) handle(p packet, now time.Time) {
	if _, ok := b.ifNames[p.ifIndex]; !ok {
		return
	}
	m, err := unpack(p.data)
	if err != nil {
		b.log.Debug("malformed mdns packet", "from", p.from, "err", err)
		return
	}
	if !m.Response || m.Opcode != dns.OpcodeQuery || m.Rcode != dns.RcodeSuccess {
		return
	}
	// RFC 6762 §6: responses must come from port 5353; we send no
	// unicast queries, so anything else is ignored.
	if p.from.Port() != mdnsPort {
		return
	}
	for _, rr := range slices.Concat(m.Answer, m.Ns, m.Extra) {
		b.add(p.ifIndex, rr, now)
	}
}

// add merges one record.
func (b *browser) add(ifIndex int, rr dns.RR, now time.Time) {
	h := rr.Header()
	if h.Class&^cacheFlush != dns.ClassINET {
		return
	}
	rd := rdataKey(rr)
	if rd == "" {
		return
	}
	if t, ok := rr.(*dns.TXT); ok && !b.validTXT(t) {
		return
	}
	key := cacheKey{ifIndex, strings.ToLower(h.Name), h.Rrtype, rd}
	if h.Class&cacheFlush != 0 {
		// Unique record: other data for the same name and type received
		// more than a second ago is flushed (RFC 6762 §10.2).
		for k, e := range b.entries {
			if k.ifIndex == key.ifIndex && k.rrtype == key.rrtype && k.name == key.name && k.rdata != key.rdata &&
				now.Sub(e.received) > goodbyeDelay && e.expires.After(now.Add(goodbyeDelay)) {
				e.expires = now.Add(goodbyeDelay)
			}
		}
	}
	e := b.entries[key]
	if e == nil {
		if h.Ttl == 0 {
			return
		}
		if len(b.entries) >= maxCache {
			b.log.Debug("mdns cache full, record dropped", "name", h.Name)
			return
		}
		e = &cacheEntry{}
		b.entries[key] = e
	}
	e.rr, e.received, e.refreshed = rr, now, 0
	if h.Ttl == 0 {
		e.expires = now.Add(goodbyeDelay) // goodbye
	} else {
		// A TTL longer than RFC 6762's 75 minutes is capped, so that a
		// peer announcing years cannot stay forever.
		e.expires = now.Add(min(time.Duration(h.Ttl)*time.Second, OtherTTL))
	}
}

// validTXT reports (and logs) TXT records whose pairs cannot be used.
func (b *browser) validTXT(t *dns.TXT) bool {
	if _, bad := parseTXT(rawTXT(t)); len(bad) > 0 {
		b.log.Debug("malformed txt pairs ignored", "name", t.Hdr.Name, "pairs", bad)
	}
	return true
}

func rawTXT(t *dns.TXT) []string {
	out := make([]string, len(t.Txt))
	for i, s := range t.Txt {
		out[i] = unescapePresentation(s)
	}
	return out
}

// expire drops records past their expiry.
func (b *browser) expire(now time.Time) {
	for k, e := range b.entries {
		if !e.expires.After(now) {
			delete(b.entries, k)
		}
	}
}

// nextDeadline returns when the cache next changes by itself (an expiry or
// a refresh due); zero if never.
func (b *browser) nextDeadline() time.Time {
	var t time.Time
	for _, e := range b.entries {
		for _, d := range []time.Time{e.expires, e.refreshAt()} {
			if !d.IsZero() && (t.IsZero() || d.Before(t)) {
				t = d
			}
		}
	}
	return t
}

// refreshAt returns when to query for the record again (80 % and 90 % of
// its TTL, RFC 6762 §5.2), zero when done.
func (e *cacheEntry) refreshAt() time.Time {
	ttl := e.expires.Sub(e.received)
	if e.refreshed >= 2 || ttl <= goodbyeDelay {
		return time.Time{}
	}
	return e.received.Add(ttl * time.Duration(8+e.refreshed) / 10)
}

// refreshDue reports whether some record is due for a refresh query.
func (b *browser) refreshDue(now time.Time) bool {
	for _, e := range b.entries {
		if r := e.refreshAt(); !r.IsZero() && !r.After(now) {
			return true
		}
	}
	return false
}

// incomplete reports whether some instance lacks its SRV or addresses.
func (b *browser) incomplete() bool {
	for pk, name := range b.instances() {
		srv, _ := b.latest(pk.ifIndex, name, dns.TypeSRV).(*dns.SRV)
		if srv == nil || len(b.addrs(pk.ifIndex, srv.Target)) == 0 {
			return true
		}
	}
	return false
}

// instances returns the instance names (presentation form) known on an
// interface: PTR targets under our service, and owners of SRV records under
// it.
func (b *browser) instances() map[peerKey]string {
	out := make(map[peerKey]string)
	for k, e := range b.entries {
		var name string
		switch rr := e.rr.(type) {
		case *dns.PTR:
			if k.name != strings.ToLower(serviceName) {
				continue
			}
			name = rr.Ptr
		case *dns.SRV:
			name = rr.Hdr.Name
		default:
			continue
		}
		if _, ok := instanceOf(name); ok {
			out[peerKey{k.ifIndex, strings.ToLower(name)}] = name
		}
	}
	return out
}

// latest returns the most recently received live record of a name and
// type on an interface.
func (b *browser) latest(ifIndex int, name string, rrtype uint16) dns.RR {
	var best *cacheEntry
	name = strings.ToLower(name)
	for k, e := range b.entries {
		if k.ifIndex == ifIndex && k.rrtype == rrtype && k.name == name {
			if best == nil || e.received.After(best.received) {
				best = e
			}
		}
	}
	if best == nil {
		return nil
	}
	return best.rr
}

// addrs returns every address of host on an interface.
func (b *browser) addrs(ifIndex int, host string) []netip.Addr {
	host = strings.ToLower(host)
	var out []netip.Addr
	for k := range b.entries {
		if k.ifIndex != ifIndex || k.name != host || (k.rrtype != dns.TypeA && k.rrtype != dns.TypeAAAA) {
			continue
		}
		a, err := netip.ParseAddr(k.rdata)
		if err != nil {
			continue
		}
		if a.Is6() && (a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast()) {
			a = a.WithZone(b.ifNames[ifIndex])
		}
		out = append(out, a)
	}
	slices.SortFunc(out, func(x, y netip.Addr) int {
		if x.Is4() != y.Is4() {
			if x.Is4() {
				return -1
			}
			return 1
		}
		return x.Compare(y)
	})
	return out
}

// snapshot assembles the complete peers: an SRV and at least one address.
func (b *browser) snapshot() map[peerKey]Peer {
	out := make(map[peerKey]Peer)
	for pk, name := range b.instances() {
		srvRR, _ := b.latest(pk.ifIndex, name, dns.TypeSRV).(*dns.SRV)
		if srvRR == nil {
			continue
		}
		addrs := b.addrs(pk.ifIndex, srvRR.Target)
		if len(addrs) == 0 {
			continue
		}
		label, _ := instanceOf(name)
		p := Peer{
			Name:      label,
			Host:      strings.TrimSuffix(srvRR.Target, "."),
			Addrs:     addrs,
			Port:      srvRR.Port,
			Interface: b.ifNames[pk.ifIndex],
		}
		if t, _ := b.latest(pk.ifIndex, name, dns.TypeTXT).(*dns.TXT); t != nil {
			p.TXT, _ = parseTXT(rawTXT(t))
		} else {
			p.TXT = map[string]string{}
		}
		if g, err := netip.ParseAddr(p.TXT["gid"]); err == nil && g.Zone() == "" {
			p.GID = g
		}
		out[pk] = p
	}
	return out
}

// update recomputes the peers and returns what changed, in a stable order.
func (b *browser) update(now time.Time) []Event {
	b.expire(now)
	next := b.snapshot()
	evs := diffPeers(b.peers, next)
	b.peers = next
	return evs
}

// diffPeers returns the events that turn the peer set prev into next:
// Appeared, Changed and Left, in the stable order of sortEvents.
func diffPeers[K comparable](prev, next map[K]Peer) []Event {
	var evs []Event
	for k, p := range next {
		old, ok := prev[k]
		switch {
		case !ok:
			evs = append(evs, Event{Appeared, p})
		case !old.equal(p):
			evs = append(evs, Event{Changed, p})
		}
	}
	for k, p := range prev {
		if _, ok := next[k]; !ok {
			evs = append(evs, Event{Left, p})
		}
	}
	sortEvents(evs)
	return evs
}

// sortEvents orders events by peer name, interface and type.
func sortEvents(evs []Event) {
	slices.SortFunc(evs, func(x, y Event) int {
		return cmp.Or(cmp.Compare(x.Peer.Name, y.Peer.Name), cmp.Compare(x.Peer.Interface, y.Peer.Interface), cmp.Compare(x.Type, y.Type))
	})
}

// dropInterface forgets every record learnt on an interface that went
// away; the next update reports its peers as Left.
func (b *browser) dropInterface(ifIndex int) {
	for k := range b.entries {
		if k.ifIndex == ifIndex {
			delete(b.entries, k)
		}
	}
}

// list returns the current peers sorted by name and interface.
func (b *browser) list() []Peer {
	out := make([]Peer, 0, len(b.peers))
	for _, p := range b.peers {
		out = append(out, p)
	}
	sortPeers(out)
	return out
}

func sortPeers(ps []Peer) {
	slices.SortFunc(ps, func(x, y Peer) int {
		return cmp.Or(cmp.Compare(x.Name, y.Name), cmp.Compare(x.Interface, y.Interface))
	})
}

// query builds the browse query for the interface: PTR for the service
// with the PTR records we hold with more than half their TTL left as known
// answers (RFC 6762 §7.1), plus follow-up questions: SRV/TXT for instances
// that lack an SRV, A/AAAA for SRV targets without addresses, and records
// due for refresh; extra names may be asked directly (Resolve).
func (b *browser) query(ifIndex int, now time.Time, extra []string) *dns.Msg {
	m := new(dns.Msg)
	m.Question = append(m.Question, dns.Question{Name: serviceName, Qtype: dns.TypePTR, Qclass: dns.ClassINET})
	asked := map[dns.Question]bool{}
	ask := func(name string, t uint16) {
		q := dns.Question{Name: name, Qtype: t, Qclass: dns.ClassINET}
		if !asked[q] {
			asked[q] = true
			m.Question = append(m.Question, q)
		}
	}
	for _, n := range extra {
		ask(n, dns.TypeSRV)
		ask(n, dns.TypeTXT)
	}
	for pk, name := range b.instances() {
		if pk.ifIndex != ifIndex {
			continue
		}
		srv, _ := b.latest(ifIndex, name, dns.TypeSRV).(*dns.SRV)
		if srv == nil {
			ask(name, dns.TypeSRV)
			ask(name, dns.TypeTXT)
			continue
		}
		if len(b.addrs(ifIndex, srv.Target)) == 0 {
			ask(srv.Target, dns.TypeA)
			ask(srv.Target, dns.TypeAAAA)
		}
	}
	for k, e := range b.entries {
		if k.ifIndex != ifIndex {
			continue
		}
		h := e.rr.Header()
		if r := e.refreshAt(); !r.IsZero() && !r.After(now) {
			e.refreshed++
			if k.rrtype != dns.TypePTR {
				ask(h.Name, k.rrtype)
			}
			continue
		}
		if k.rrtype == dns.TypePTR && k.name == strings.ToLower(serviceName) {
			left := e.expires.Sub(now)
			full := e.expires.Sub(e.received)
			if h.Ttl > 0 && left > full/2 {
				known := dns.Copy(e.rr)
				known.Header().Ttl = uint32(left.Seconds())
				known.Header().Class = dns.ClassINET
				m.Answer = append(m.Answer, known)
			}
		}
	}
	return m
}
