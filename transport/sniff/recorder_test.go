package sniff

import (
	"bytes"
	"io"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestRecorderConcurrent(t *testing.T) {
	var buf bytes.Buffer
	rec, err := NewRecorder(&buf)
	if err != nil {
		t.Fatal(err)
	}
	const goroutines, each = 4, 50
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			src := netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, byte(2 + g)}), 49152)
			dst := netip.MustParseAddrPort("127.0.0.1:4791")
			payload := []byte(strings.Repeat(string(rune('a'+g)), 100+g))
			for i := range each {
				if err := rec.Record(time.Now(), src, dst, uint16(i), payload); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()

	r, err := NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	perSource := make(map[netip.Addr]int)
	for {
		p, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		_, _, payload, src, _, ok := DecodeUDP(p.LinkType, p.Data)
		g := int(src.Addr().As4()[3]) - 2
		if !ok || len(payload) != 100+g || payload[0] != byte('a'+g) || payload[len(payload)-1] != byte('a'+g) {
			t.Fatalf("interleaved or corrupt record from %v: %q", src, payload)
		}
		perSource[src.Addr()]++
	}
	if len(perSource) != goroutines {
		t.Fatalf("records from %d sources, want %d", len(perSource), goroutines)
	}
	for a, n := range perSource {
		if n != each {
			t.Errorf("%v: %d records, want %d", a, n, each)
		}
	}
}

func TestRecorderRejectsOversizedPayload(t *testing.T) {
	rec, err := NewRecorder(io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	v4 := netip.MustParseAddrPort("127.0.0.2:1")
	v6 := netip.MustParseAddrPort("[::1]:1")
	if err := rec.Record(time.Now(), v4, v4, 0, make([]byte, MaxUDPPayloadIPv4+1)); err == nil {
		t.Error("IPv4: oversized payload accepted")
	}
	if err := rec.Record(time.Now(), v4, v4, 0, make([]byte, MaxUDPPayloadIPv4)); err != nil {
		t.Errorf("IPv4: largest payload rejected: %v", err)
	}
	if err := rec.Record(time.Now(), v6, v6, 0, make([]byte, MaxUDPPayloadIPv6+1)); err == nil {
		t.Error("IPv6: oversized payload accepted")
	}
}
