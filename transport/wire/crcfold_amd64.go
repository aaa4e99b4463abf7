//go:build !purego

package wire

import (
	"encoding/binary"
	"math/bits"

	"golang.org/x/sys/cpu"
)

// The ICRC covers every payload byte, so its CRC-32 is the largest
// per-byte cost of a RoCE stream besides the kernel's copies.
// hash/crc32 folds four 128-bit lanes, which the latency of the carry-less
// multiply bounds; ieeeFold4 and ieeeFold8 keep sixteen lanes
// in flight (docs/performance.md has the profiles and figures) and hand
// the last 16 bytes and the tail back to hash/crc32. ieeeFold4 needs
// AVX-512 and VPCLMULQDQ, ieeeFold8 AVX2 and VPCLMULQDQ (the 256-bit
// form: some CPUs, and virtual machines that hide AVX-512, have it without
// AVX-512); elsewhere crcUpdate is hash/crc32 alone.

//go:noescape
func ieeeFold4(raw uint32, p []byte, k *foldConstants) (lo, hi uint64)

//go:noescape
func ieeeFold8(raw uint32, p []byte, k *foldConstants) (lo, hi uint64)

// cpuid runs CPUID with EAX = leaf and ECX = sub.
func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)

// The folds crcUpdate can use.
const (
	foldNone   = iota // hash/crc32 only
	foldAVX2          // ieeeFold8
	foldAVX512        // ieeeFold4
)

// foldConstants holds the multipliers of ieeeFold4 and ieeeFold8: step
// folds each 128-bit lane forward by 2048 bits (the sixteen lanes), lanes[j]
// moves lane j of the final 256 bytes forward by (15-j)*128 bits.
type foldConstants struct {
	step  [4][2]uint64
	lanes [16][2]uint64
}

var (
	// folds are the folds this CPU has, best last; fold is the one
	// crcUpdate uses. golang.org/x/sys/cpu reports VPCLMULQDQ only with
	// AVX-512, so for AVX2 the CPUID bit (leaf 7, ECX bit 10) is read
	// here; HasAVX2 includes the OS's saving of the 256-bit registers.
	folds = func() []int {
		f := []int{foldNone}
		if cpu.X86.HasAVX2 && hasVPCLMULQDQ() {
			f = append(f, foldAVX2)
		}
		if cpu.X86.HasAVX512F && cpu.X86.HasAVX512VPCLMULQDQ {
			f = append(f, foldAVX512)
		}
		return f
	}()
	fold = folds[len(folds)-1]

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

// hasVPCLMULQDQ reports CPUID's VPCLMULQDQ bit (leaf 7, ECX bit 10).
func hasVPCLMULQDQ() bool {
	if top, _, _, _ := cpuid(0, 0); top < 7 {
		return false
	}
	_, _, ecx, _ := cpuid(7, 0)
	return ecx&(1<<10) != 0
}

// foldMin is the shortest input the folds take over from hash/crc32 for.
const foldMin = 1024

// crcUpdate is crc32.Update(crc, crc32.IEEETable, p).
func crcUpdate(crc uint32, p []byte) uint32 { return crcUpdateWith(fold, crc, p) }

// crcUpdateWith is crcUpdate with the fold f (which the CPU must have).
func crcUpdateWith(f int, crc uint32, p []byte) uint32 {
	if f == foldNone || len(p) < foldMin {
		return crcUpdateStd(crc, p)
	}
	n := len(p) &^ 255
	var lo, hi uint64
	if f == foldAVX512 {
		lo, hi = ieeeFold4(^crc, p[:n], &foldConst)
	} else {
		lo, hi = ieeeFold8(^crc, p[:n], &foldConst)
	}
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:], lo)
	binary.LittleEndian.PutUint64(b[8:], hi)
	r := rawUpdate(0, b[:])
	if rest := p[n:]; len(rest) >= shortCRC {
		return crcUpdateStd(^r, rest)
	}
	return ^rawUpdate(r, p[n:])
}
