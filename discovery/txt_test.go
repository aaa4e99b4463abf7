package discovery

import (
	"maps"
	"strings"
	"testing"

	"github.com/miekg/dns"
)

func TestEncodeTXT(t *testing.T) {
	s := testService("x")
	got, err := encodeTXT(s.txt())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"txtvers=1", "gid=::ffff:198.18.0.2", "guid=0002c9fffe000001", "mtu=4096",
		"dev=tbrdma0", "caps=rc,ud,atomic", "ver=0.1.0", "oob=18515"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("got %q\nwant %q", got, want)
	}
	if got, _ := encodeTXT(nil); len(got) != 1 || got[0] != "" {
		t.Errorf("empty TXT = %q, want one empty string (RFC 6763 §6.1)", got)
	}
	for _, bad := range []txtPair{{"", "v"}, {"a=b", "v"}, {"k\x7f", "v"}, {"k", strings.Repeat("v", 254)}} {
		if _, err := encodeTXT([]txtPair{bad}); err == nil {
			t.Errorf("encodeTXT(%q) succeeded", bad)
		}
	}
	if _, err := encodeTXT([]txtPair{{"k", strings.Repeat("v", 253)}}); err != nil {
		t.Errorf("255-byte string rejected: %v", err)
	}
	// An empty value is a boolean attribute: the key alone, so that a
	// 255-byte key with no value still fits (and parses back the same).
	long := strings.Repeat("k", 255)
	if got, err := encodeTXT([]txtPair{{long, ""}, {"flag", ""}}); err != nil || len(got) != 2 || got[0] != long || got[1] != "flag" {
		t.Errorf("empty values: %q, %v; want the keys alone", got, err)
	}
}

func TestParseTXT(t *testing.T) {
	tests := []struct {
		name    string
		in      []string
		want    map[string]string
		wantBad int
	}{
		{"empty record", []string{""}, map[string]string{}, 0},
		{"pairs", []string{"txtvers=1", "MTU=4096"}, map[string]string{"txtvers": "1", "mtu": "4096"}, 0},
		{"boolean and empty", []string{"flag", "empty="}, map[string]string{"flag": "", "empty": ""}, 0},
		{"value with =", []string{"k=a=b"}, map[string]string{"k": "a=b"}, 0},
		{"first wins, case-insensitive", []string{"Key=1", "kEY=2"}, map[string]string{"key": "1"}, 0},
		{"binary value", []string{"k=\x00\xff\\\""}, map[string]string{"k": "\x00\xff\\\""}, 0},
		{"spaces in key are significant", []string{"a b=1"}, map[string]string{"a b": "1"}, 0},
		{"bad keys skipped", []string{"=v", "k\x01=v", "ok=1"}, map[string]string{"ok": "1"}, 2},
		{"too long", []string{strings.Repeat("k", 256)}, map[string]string{}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, bad := parseTXT(tt.in)
			if !maps.Equal(got, tt.want) || len(bad) != tt.wantBad {
				t.Errorf("parseTXT(%q) = %q, bad %q; want %q, %d bad", tt.in, got, bad, tt.want, tt.wantBad)
			}
		})
	}
}

// TestTXTWire checks that raw bytes survive miekg/dns's presentation form
// both ways (escapeTXT on send, unescapePresentation on receive).
func TestTXTWire(t *testing.T) {
	in := []string{"k=\\", "b=\x00\x01\xff", `q="x"`, "d=\\065"}
	if got := txtRoundTrip(t, in); strings.Join(got, "|") != strings.Join(in, "|") {
		t.Errorf("round trip: got %q, want %q", got, in)
	}
}

// txtRoundTrip packs raw strings in a TXT record and unpacks them.
func txtRoundTrip(t testing.TB, raw []string) []string {
	rr := &dns.TXT{Hdr: dns.RR_Header{Name: "x.local.", Rrtype: dns.TypeTXT, Class: dns.ClassINET}}
	for _, s := range raw {
		rr.Txt = append(rr.Txt, escapeTXT(s))
	}
	m := new(dns.Msg)
	m.Answer = []dns.RR{rr}
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	var out dns.Msg
	if err := out.Unpack(b); err != nil {
		t.Fatal(err)
	}
	return rawTXT(out.Answer[0].(*dns.TXT))
}

// splitTXT splits TXT rdata (length-prefixed strings) the way a resolver
// does; ok false if the lengths overrun.
func splitTXT(b []byte) (out []string, ok bool) {
	for len(b) > 0 {
		n := int(b[0])
		if 1+n > len(b) {
			return out, false
		}
		out = append(out, string(b[1:1+n]))
		b = b[1+n:]
	}
	return out, true
}

// FuzzTXT feeds arbitrary TXT rdata to the parser and checks that what it
// accepts encodes again and parses to the same map, and that every string
// survives miekg/dns's presentation form.
func FuzzTXT(f *testing.F) {
	f.Add([]byte("\x09txtvers=1\x08mtu=4096"))
	f.Add([]byte("\x00"))
	f.Add([]byte("\x04flag\x06empty="))
	f.Fuzz(func(t *testing.T, data []byte) {
		strs, ok := splitTXT(data)
		if !ok {
			return
		}
		m, _ := parseTXT(strs)
		var pairs []txtPair
		for k, v := range m {
			if !validKey(k) || strings.ToLower(k) != k {
				t.Fatalf("parsed invalid key %q", k)
			}
			pairs = append(pairs, txtPair{k, v})
		}
		enc, err := encodeTXT(pairs)
		if err != nil {
			t.Fatalf("re-encode %q: %v", pairs, err)
		}
		if m2, bad := parseTXT(enc); !maps.Equal(m, m2) || len(bad) > 0 {
			t.Fatalf("re-parse: %q != %q (bad %q)", m2, m, bad)
		}
		if len(strs) > 0 {
			if got := txtRoundTrip(t, strs); strings.Join(got, "\x00") != strings.Join(strs, "\x00") || len(got) != len(strs) {
				t.Fatalf("wire round trip: %q != %q", got, strs)
			}
		}
	})
}

// The large-segment key: advertised when set, read back by Peer.SegmentSize.
func TestSegmentSizeTXT(t *testing.T) {
	s := Service{MTU: 4096, SegmentSize: 61440}
	var seg string
	for _, p := range s.txt() {
		if p.key == "seg" {
			seg = p.value
		}
	}
	if seg != "61440" {
		t.Fatalf("TXT seg = %q, want 61440", seg)
	}
	for _, p := range (Service{MTU: 4096}).txt() {
		if p.key == "seg" {
			t.Fatal("seg advertised without a segment size")
		}
	}
	for v, want := range map[string]int{"61440": 61440, "": 0, "x": 0, "-5": 0} {
		if got := (Peer{TXT: map[string]string{"seg": v}}).SegmentSize(); got != want {
			t.Errorf("SegmentSize with seg=%q = %d, want %d", v, got, want)
		}
	}
}
