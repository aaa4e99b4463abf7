package discovery

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"strings"

	"github.com/hashicorp/mdns"
	"github.com/miekg/dns"
)

// cacheFlush is the top bit of the record class in responses (RFC 6762
// §10.2), set on unique records.
const cacheFlush = 1 << 15

// zone is what one Advertiser publishes on one interface. The records come
// from hashicorp/mdns's MDNSService (PTR, SRV, TXT, A, AAAA for a
// question); zone fixes what that library gets wrong for a responder:
// case-insensitive names, answer vs additional sections, RFC 6762 TTLs,
// cache-flush bits, and only this interface's addresses.
type zone struct {
	svc      *mdns.MDNSService
	instance string // presentation form, fully qualified
	host     string // fully qualified
	enum     string // _services._dns-sd._udp.local.
}

func newZone(instance, hostLabel string, port uint16, addrs []netip.Addr, txt []string) (*zone, error) {
	if len(addrs) == 0 {
		// The library would look the host name up in DNS instead.
		return nil, ErrNoAddress
	}
	ips := make([]net.IP, 0, len(addrs))
	for _, a := range addrs {
		ips = append(ips, net.IP(a.WithZone("").AsSlice()))
	}
	esc := make([]string, len(txt))
	for i, s := range txt {
		esc[i] = escapeTXT(s)
	}
	host := hostLabel + ".local."
	svc, err := mdns.NewMDNSService(escapeLabel(instance), ServiceType, Domain, host, int(port), ips, esc)
	if err != nil {
		return nil, err
	}
	return &zone{
		svc:      svc,
		instance: instanceFQDN(instance),
		host:     host,
		enum:     "_services._dns-sd._udp." + Domain,
	}, nil
}

// canonical maps a question name onto the spelling the zone uses (names
// compare case-insensitively, RFC 6762 §16), or "" if it is none of ours.
func (z *zone) canonical(name string) string {
	for _, n := range []string{z.instance, serviceName, z.host, z.enum} {
		if strings.EqualFold(name, n) {
			return n
		}
	}
	return ""
}

// answer returns the records answering q: those with the asked name and
// type in answers, the related ones (SRV, TXT, addresses) in extra, as
// RFC 6763 §12 recommends.
func (z *zone) answer(q dns.Question) (answers, extra []dns.RR) {
	name := z.canonical(q.Name)
	if name == "" {
		return nil, nil
	}
	qtype := q.Qtype
	var rrs []dns.RR
	if name == z.host && qtype == dns.TypeANY {
		rrs = append(z.records(name, dns.TypeA), z.records(name, dns.TypeAAAA)...)
	} else {
		rrs = z.records(name, qtype)
	}
	if name == z.instance && (qtype == dns.TypeTXT || qtype == dns.TypeSRV) {
		// A TXT answer brings the SRV and addresses too, and vice versa,
		// so that one round trip completes the peer.
		other := uint16(dns.TypeSRV)
		if qtype == dns.TypeSRV {
			other = dns.TypeTXT
		}
		rrs = append(rrs, z.records(name, other)...)
	}
	for _, rr := range rrs {
		h := rr.Header()
		if strings.EqualFold(h.Name, name) && (qtype == dns.TypeANY || h.Rrtype == qtype) {
			answers = append(answers, rr)
		} else {
			extra = append(extra, rr)
		}
	}
	return answers, dedupe(extra)
}

// records asks the library and fixes TTLs and classes.
func (z *zone) records(name string, qtype uint16) []dns.RR {
	rrs := z.svc.Records(dns.Question{Name: name, Qtype: qtype, Qclass: dns.ClassINET})
	out := make([]dns.RR, 0, len(rrs))
	for _, rr := range rrs {
		rr = dns.Copy(rr)
		h := rr.Header()
		h.Class = dns.ClassINET
		switch h.Rrtype {
		case dns.TypeA, dns.TypeAAAA, dns.TypeSRV:
			h.Ttl = uint32(HostTTL.Seconds())
			h.Class |= cacheFlush
		case dns.TypeTXT:
			h.Ttl = uint32(OtherTTL.Seconds())
			h.Class |= cacheFlush
		default: // PTR: shared
			h.Ttl = uint32(OtherTTL.Seconds())
		}
		out = append(out, rr)
	}
	return out
}

// all returns every record of the zone, for announcements and goodbyes.
func (z *zone) all() []dns.RR {
	rrs := z.records(serviceName, dns.TypePTR) // PTR + SRV + A + AAAA + TXT
	rrs = append(rrs, z.records(z.enum, dns.TypePTR)...)
	return dedupe(rrs)
}

// probeRecords returns the unique records we claim, for the authority
// section of probes.
func (z *zone) probeRecords() []dns.RR {
	var out []dns.RR
	for _, rr := range z.all() {
		if rr.Header().Rrtype != dns.TypePTR {
			out = append(out, rr)
		}
	}
	return out
}

// owns reports whether name is one of the unique names the zone claims.
func (z *zone) owns(name string) bool {
	return strings.EqualFold(name, z.instance) || strings.EqualFold(name, z.host)
}

func dedupe(rrs []dns.RR) []dns.RR {
	out := rrs[:0]
	for _, rr := range rrs {
		dup := false
		for _, o := range out {
			if dns.IsDuplicate(rr, o) {
				dup = true
				break
			}
		}
		if !dup {
			out = append(out, rr)
		}
	}
	return out
}

// errCounts reports a message with fewer records than its header claims.
var errCounts = errors.New("section counts do not match the header (truncated message)")

// unpack parses a datagram strictly: miekg/dns accepts a message cut at a
// record boundary, with fewer records than the header counts; such a
// datagram is rejected here.
func unpack(b []byte) (*dns.Msg, error) {
	m := new(dns.Msg)
	if err := m.Unpack(b); err != nil {
		return nil, err
	}
	if len(b) < 12 ||
		int(binary.BigEndian.Uint16(b[4:])) != len(m.Question) ||
		int(binary.BigEndian.Uint16(b[6:])) != len(m.Answer) ||
		int(binary.BigEndian.Uint16(b[8:])) != len(m.Ns) ||
		int(binary.BigEndian.Uint16(b[10:])) != len(m.Extra) {
		return nil, errCounts
	}
	return m, nil
}
