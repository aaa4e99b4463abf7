package wire

import (
	"hash/crc32"
	"math/rand/v2"
	"strconv"
	"testing"
)

// crcUpdate is hash/crc32's IEEE update, whatever the length, alignment and
// starting value (on amd64 with AVX-512 it takes its own path from 1024
// bytes on: every length around the 256-byte steps and the threshold).
func TestCRCUpdateMatchesHashCRC32(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 70016)
	for i := range buf {
		buf[i] = byte(r.Uint32())
	}
	var lens []int
	for n := 0; n <= 2100; n++ {
		lens = append(lens, n)
	}
	lens = append(lens, 4096, 4124, 4127, 8192, 61440, 61468, 65535, 69999)
	for _, n := range lens {
		for _, off := range []int{0, 1, 3, 8} {
			p := buf[off : off+n]
			for _, c := range []uint32{0, 0xFFFFFFFF, r.Uint32()} {
				if got, want := crcUpdate(c, p), crc32.Update(c, crc32.IEEETable, p); got != want {
					t.Fatalf("len %d, offset %d, crc %#x: %#08x, hash/crc32 %#08x (fold in use: %v)", n, off, c, got, want, haveFold)
				}
			}
		}
	}
	t.Logf("fold path in use: %v", haveFold)
}

func TestCRCUpdateNoAllocs(t *testing.T) {
	p := make([]byte, 61440)
	if a := testing.AllocsPerRun(100, func() { crcUpdate(1, p) }); a != 0 {
		t.Errorf("%v allocations per crcUpdate, want 0", a)
	}
}

func FuzzCRCUpdate(f *testing.F) {
	f.Add(uint32(0), make([]byte, 1024))
	f.Add(uint32(0xdeadbeef), make([]byte, 1300))
	f.Fuzz(func(t *testing.T, c uint32, p []byte) {
		if got, want := crcUpdate(c, p), crc32.Update(c, crc32.IEEETable, p); got != want {
			t.Fatalf("len %d crc %#x: %#08x, hash/crc32 %#08x", len(p), c, got, want)
		}
	})
}

func BenchmarkCRCUpdate(b *testing.B) {
	for _, n := range []int{1024, 4096, 61440} {
		p := make([]byte, n)
		b.Run("fold/"+strconv.Itoa(n), func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				crcUpdate(0, p)
			}
		})
		b.Run("hash-crc32/"+strconv.Itoa(n), func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				crc32.Update(0, crc32.IEEETable, p)
			}
		})
	}
}
