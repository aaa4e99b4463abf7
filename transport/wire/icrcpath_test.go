package wire

import (
	"bytes"
	"math/rand/v2"
	"net/netip"
	"strconv"
	"testing"
)

// TestICRCPathVectors: the worked examples of the wire reference through a
// path, whole and in parts.
func TestICRCPathVectors(t *testing.T) {
	for _, v := range icrcVectors {
		t.Run(v.name, func(t *testing.T) {
			_, _, roce, src, dst, id := splitIP(t, unhex(t, v.pkt))
			var p ICRCPath
			if p.For(src, dst) {
				t.Fatal("the zero ICRCPath claims a path")
			}
			p.Reset(src, dst)
			if !p.For(src, dst) || p.For(dst, src) {
				t.Fatalf("For after Reset(%v, %v): %v, reversed %v", src, dst, p.For(src, dst), p.For(dst, src))
			}
			pkt := bytes.Clone(roce)
			clear(pkt[len(pkt)-ICRCSize:])
			p.Put(pkt, id)
			if got := Trailer(pkt); got != v.want {
				t.Errorf("Put: %#x, want %#x", got, v.want)
			}
			body := roce[:len(roce)-ICRCSize]
			pad := int(body[1] >> 4 & 3)
			tail := make([]byte, pad+ICRCSize)
			copy(tail, body[len(body)-pad:])
			p.PutParts(body[:BTHSize], body[BTHSize:len(body)-pad], tail, id)
			if got := Trailer(tail); got != v.want {
				t.Errorf("PutParts: %#x, want %#x", got, v.want)
			}
		})
	}
}

// TestICRCPathMatchesICRC: random packets of both families, every kind of
// length (short, around the fold's threshold, an MTU's), identifications
// inside and outside the GSO table, header lengths from a bare BTH to the
// largest, pad bytes that are not zero, and lengths that rotate through
// the path's two-entry cache, against PutICRC and PutICRCParts.
func TestICRCPathMatchesICRC(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	ends := [][2]netip.AddrPort{
		{netip.MustParseAddrPort("198.18.0.2:49152"), netip.MustParseAddrPort("198.18.0.3:4791")},
		{netip.MustParseAddrPort("[fe80::1]:4791"), netip.MustParseAddrPort("[fe80::2]:4791")},
		{netip.MustParseAddrPort("[::ffff:198.18.0.2]:4791"), netip.MustParseAddrPort("198.18.0.3:4791")},
	}
	sizes := []int{0, 1, 7, 64, 1019, 1020, 1024, 1100, 4096, 8192}
	for _, e := range ends {
		var p ICRCPath
		p.Reset(e[0], e[1])
		for range 3000 {
			hl := BTHSize + rng.IntN(MaxHeaderRoom-BTHSize+1)
			n := sizes[rng.IntN(len(sizes))]
			pad := rng.IntN(4)
			id := uint16(rng.IntN(80))
			if rng.IntN(10) == 0 {
				id = uint16(rng.Uint32())
			}
			pkt := make([]byte, hl+n+pad+ICRCSize)
			for i := range len(pkt) - ICRCSize {
				pkt[i] = byte(rng.Uint32())
			}
			want := bytes.Clone(pkt)
			PutICRC(want, e[0], e[1], id)
			got := bytes.Clone(pkt)
			p.Put(got, id)
			if !bytes.Equal(got, want) {
				t.Fatalf("%v→%v, %d-byte headers, %d-byte payload, pad %d, id %d: Put %x, PutICRC %x",
					e[0], e[1], hl, n, pad, id, got[len(got)-ICRCSize:], want[len(want)-ICRCSize:])
			}
			var back ICRCPath
			back.Reset(e[0], e[1])
			if gotID, ok := back.Verify(want); !ok || e[0].Addr().Unmap().Is4() && gotID != id {
				t.Fatalf("%v→%v, %d-byte packet, id %d: Verify = id %d, %v", e[0], e[1], len(want), id, gotID, ok)
			}
			bad := bytes.Clone(want)
			if i := rng.IntN(len(bad)); i != 4 { // BTH byte 4 is masked: not covered
				bad[i] ^= 1 << rng.IntN(8)
			} else {
				bad[i+1] ^= 1
			}
			if gotID, ok := back.Verify(bad); ok && (e[0].Addr().Unmap().Is6() || gotID == id) {
				t.Fatalf("%v→%v: a flipped bit verified (id %d)", e[0], e[1], gotID)
			}
			if g1, ok1 := VerifyICRC(bad, e[0], e[1]); true {
				if g2, ok2 := back.Verify(bad); g2 != g1 || ok2 != ok1 {
					t.Fatalf("%v→%v: Verify %d %v, VerifyICRC %d %v", e[0], e[1], g2, ok2, g1, ok1)
				}
			}
			tail := bytes.Clone(pkt[hl+n:])
			p.PutParts(pkt[:hl], pkt[hl:hl+n], tail, id)
			if !bytes.Equal(tail, want[hl+n:]) {
				t.Fatalf("%v→%v, %d-byte headers, %d-byte payload, pad %d, id %d: PutParts %x, PutICRC %x",
					e[0], e[1], hl, n, pad, id, tail[len(tail)-ICRCSize:], want[len(want)-ICRCSize:])
			}
		}
	}
}

func TestICRCPathNoAllocs(t *testing.T) {
	src := netip.MustParseAddrPort("198.18.0.2:4791")
	dst := netip.MustParseAddrPort("198.18.0.3:4791")
	var p ICRCPath
	pkt := make([]byte, 12+4096+4)
	hdr, tail := make([]byte, 28), make([]byte, 4)
	if n := testing.AllocsPerRun(100, func() {
		if !p.For(src, dst) {
			p.Reset(src, dst)
		}
		p.Put(pkt, 7)
		p.PutParts(hdr, pkt, tail, 3)
	}); n != 0 {
		t.Errorf("allocs = %v, want 0", n)
	}
}

// TestVerifyExpect: whatever the guess, VerifyExpect finds the ID a
// packet was sent with and rejects a damaged packet, as Verify does; on
// IPv6 it ignores the guess.
func TestVerifyExpect(t *testing.T) {
	for _, e := range [][2]string{{"198.18.0.2:4791", "198.18.0.3:4791"}, {"[fe80::1]:4791", "[fe80::2]:4791"}} {
		src, dst := netip.MustParseAddrPort(e[0]), netip.MustParseAddrPort(e[1])
		var p ICRCPath
		p.Reset(src, dst)
		for _, n := range []int{16, 4096} {
			pkt := make([]byte, BTHSize+n+ICRCSize)
			for i := range pkt {
				pkt[i] = byte(i * 7)
			}
			pkt[1] = 0 // no pad
			for _, id := range []uint16{0, 1, 14, 63, 64, 0xBEEF} {
				if src.Addr().Is6() && id != 0 {
					continue // no ID on IPv6
				}
				PutICRC(pkt, src, dst, id)
				for _, guess := range []uint16{0, 1, 14, 63, 64, 0xBEEF, id} {
					if got, ok := p.VerifyExpect(pkt, guess); !ok || got != id {
						t.Errorf("%v, %d bytes, ID %d, guess %d: VerifyExpect = %d, %v; want %d, true", src, n, id, guess, got, ok, id)
					}
					pkt[BTHSize+n/2] ^= 0x10
					if got, ok := p.VerifyExpect(pkt, guess); ok {
						t.Errorf("%v, %d bytes, ID %d, guess %d: damaged packet accepted (ID %d)", src, n, id, guess, got)
					}
					pkt[BTHSize+n/2] ^= 0x10
				}
			}
		}
	}
}

func BenchmarkICRCPathVerify(b *testing.B) {
	src := netip.MustParseAddrPort("198.18.0.2:4791")
	dst := netip.MustParseAddrPort("198.18.0.3:4791")
	pkt := make([]byte, BTHSize+4096+ICRCSize)
	for _, c := range []struct {
		name      string
		id, guess uint16
	}{{"id0", 0, 0}, {"guessed", 5, 5}, {"recovered", 5, 0}} {
		PutICRC(pkt, src, dst, c.id)
		b.Run(c.name+"/4096", func(b *testing.B) {
			var p ICRCPath
			p.Reset(src, dst)
			b.SetBytes(int64(len(pkt)))
			for b.Loop() {
				if id, ok := p.VerifyExpect(pkt, c.guess); !ok || id != c.id {
					b.Fatal(id, ok)
				}
			}
		})
	}
}

func BenchmarkICRCPath(b *testing.B) {
	src := netip.MustParseAddrPort("198.18.0.2:4791")
	dst := netip.MustParseAddrPort("198.18.0.3:4791")
	for _, n := range []int{64, 4096} {
		hdr, payload, tail := make([]byte, BTHSize), make([]byte, n), make([]byte, ICRCSize)
		hdr[1] = 0 // no pad
		b.Run("PutICRCParts/"+strconv.Itoa(n), func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				PutICRCParts(hdr, payload, tail, src, dst, 3)
			}
		})
		b.Run("ICRCPath.PutParts/"+strconv.Itoa(n), func(b *testing.B) {
			var p ICRCPath
			p.Reset(src, dst)
			b.SetBytes(int64(n))
			for b.Loop() {
				p.PutParts(hdr, payload, tail, 3)
			}
		})
	}
}

// FuzzICRCPath: any packet, split anywhere after its BTH, through a path
// gives PutICRC's trailer, and Verify agrees with VerifyICRC on it
// whatever its bytes.
func FuzzICRCPath(f *testing.F) {
	f.Add(false, uint16(0), uint8(0), []byte("0123456789abcdefghij"))
	f.Add(true, uint16(5), uint8(16), make([]byte, 1100))
	f.Fuzz(func(t *testing.T, v6 bool, id uint16, split uint8, pkt []byte) {
		src, dst := netip.MustParseAddrPort("198.18.0.2:4791"), netip.MustParseAddrPort("198.18.0.3:4791")
		if v6 {
			src, dst = netip.MustParseAddrPort("[fe80::1]:4791"), netip.MustParseAddrPort("[fe80::2]:4791")
		}
		var p, back ICRCPath
		p.Reset(src, dst)
		back.Reset(src, dst)
		g1, ok1 := VerifyICRC(pkt, src, dst)
		if g2, ok2 := back.Verify(pkt); g1 != g2 || ok1 != ok2 {
			t.Fatalf("Verify %d %v, VerifyICRC %d %v", g2, ok2, g1, ok1)
		}
		for _, guess := range []uint16{id, uint16(split), g1 + 1} {
			if g2, ok2 := back.VerifyExpect(pkt, guess); g1 != g2 || ok1 != ok2 {
				t.Fatalf("VerifyExpect(guess %d) %d %v, VerifyICRC %d %v", guess, g2, ok2, g1, ok1)
			}
		}
		if len(pkt) < BTHSize+ICRCSize {
			return
		}
		pad := int(pkt[1] >> 4 & 3)
		body := len(pkt) - ICRCSize - pad
		if body < BTHSize {
			return
		}
		want := bytes.Clone(pkt)
		PutICRC(want, src, dst, id)
		got := bytes.Clone(pkt)
		p.Put(got, id)
		hl := min(BTHSize+int(split), body)
		tail := bytes.Clone(pkt[body:])
		p.PutParts(pkt[:hl], pkt[hl:body], tail, id)
		if !bytes.Equal(got, want) || !bytes.Equal(tail, want[body:]) {
			t.Fatalf("Put %x, PutParts %x, PutICRC %x", got[len(got)-ICRCSize:], tail[len(tail)-ICRCSize:], want[len(want)-ICRCSize:])
		}
	})
}
