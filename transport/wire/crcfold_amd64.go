//go:build !purego

package wire

import (
	"encoding/binary"
	"math/bits"

	"golang.org/x/sys/cpu"
)

// The ICRC covers every payload byte, so its CRC-32 is the largest
// per-byte cost of a RoCE stream besides the kernel's copies.
// hash/crc32 folds with one 512-bit accumulator, which the latency of the
// carry-less multiply bounds; ieeeFold4 keeps four in flight (about twice
// as fast; docs/performance.md has the profile and figures) and hands the last 16 bytes and the tail back to hash/crc32. It needs
// AVX-512 and VPCLMULQDQ; elsewhere crcUpdate is hash/crc32 alone.

//go:noescape
func ieeeFold4(raw uint32, p []byte, k *foldConstants) (lo, hi uint64)

// foldConstants holds the multipliers of ieeeFold4: step folds each
// 128-bit lane forward by 2048 bits (the four accumulators), lanes[j]
// moves lane j of the final 256 bytes forward by (15-j)*128 bits.
type foldConstants struct {
	step  [4][2]uint64
	lanes [16][2]uint64
}

var (
	haveFold  = cpu.X86.HasAVX512F && cpu.X86.HasAVX512VPCLMULQDQ
	foldConst = func() (k foldConstants) {
		for i := range k.step {
			k.step[i] = foldPair(2048)
		}
		for j := range 15 {
			k.lanes[j] = foldPair((15 - j) * 128)
		}
		return k
	}()
)

// foldPair returns the multipliers that move a 128-bit lane of the
// reflected CRC-32 state forward by d bits (d >= 128): for its first eight
// bytes x^(d+32) mod P, for the other eight x^(d-32) mod P, bit-reflected
// and shifted left by one, as carry-less multiplication of reflected
// operands needs.
func foldPair(d int) [2]uint64 {
	return [2]uint64{xPowModP(d + 32), xPowModP(d - 32)}
}

func xPowModP(n int) uint64 {
	r := uint64(1)
	for range n {
		r <<= 1
		if r&(1<<32) != 0 {
			r ^= 0x104C11DB7 // the CRC-32 polynomial with its x^32 term
		}
	}
	return uint64(bits.Reverse32(uint32(r))) << 1
}

// foldMin is the shortest input ieeeFold4 takes over from hash/crc32 for.
const foldMin = 1024

// crcUpdate is crc32.Update(crc, crc32.IEEETable, p).
func crcUpdate(crc uint32, p []byte) uint32 {
	if !haveFold || len(p) < foldMin {
		return crcUpdateStd(crc, p)
	}
	n := len(p) &^ 255
	lo, hi := ieeeFold4(^crc, p[:n], &foldConst)
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:], lo)
	binary.LittleEndian.PutUint64(b[8:], hi)
	r := rawUpdate(0, b[:])
	if rest := p[n:]; len(rest) >= shortCRC {
		return crcUpdateStd(^r, rest)
	}
	return ^rawUpdate(r, p[n:])
}
