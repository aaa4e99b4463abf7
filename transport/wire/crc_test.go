package wire

import (
	"hash/crc32"
	"math/rand/v2"
	"strconv"
	"testing"
)

// crcUpdate is hash/crc32's IEEE update, whatever the length, alignment and
// starting value (on amd64 with AVX2 or AVX-512 and VPCLMULQDQ it takes its
// own path from 1024 bytes on: every length around the 256-byte steps and
// the threshold), with each fold this CPU has.
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
				want := crc32.Update(c, crc32.IEEETable, p)
				for _, f := range folds {
					if got := crcUpdateWith(f, c, p); got != want {
						t.Fatalf("fold %d, len %d, offset %d, crc %#x: %#08x, hash/crc32 %#08x", f, n, off, c, got, want)
					}
				}
			}
		}
	}
	t.Logf("folds checked: %v (0 hash/crc32, 1 AVX2, 2 AVX-512)", folds)
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
		want := crc32.Update(c, crc32.IEEETable, p)
		for _, fo := range folds {
			if got := crcUpdateWith(fo, c, p); got != want {
				t.Fatalf("fold %d, len %d crc %#x: %#08x, hash/crc32 %#08x", fo, len(p), c, got, want)
			}
		}
	})
}

func BenchmarkCRCUpdate(b *testing.B) {
	for _, n := range []int{1024, 4096, 61440} {
		p := make([]byte, n)
		for _, f := range folds[1:] {
			b.Run("fold"+strconv.Itoa(f)+"/"+strconv.Itoa(n), func(b *testing.B) {
				b.SetBytes(int64(n))
				for b.Loop() {
					crcUpdateWith(f, 0, p)
				}
			})
		}
		b.Run("hash-crc32/"+strconv.Itoa(n), func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				crc32.Update(0, crc32.IEEETable, p)
			}
		})
	}
}
