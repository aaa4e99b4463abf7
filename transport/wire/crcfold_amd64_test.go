//go:build !purego

package wire

import (
	"testing"

	"golang.org/x/sys/cpu"
)

// The CPUID read for the AVX2 fold agrees with golang.org/x/sys/cpu where
// that reports the bit (with AVX-512), and the chosen fold is the best one
// the CPU has.
func TestFoldDetection(t *testing.T) {
	if cpu.X86.HasAVX512F && cpu.X86.HasAVX512VPCLMULQDQ != hasVPCLMULQDQ() {
		t.Errorf("CPUID leaf 7 ECX bit 10 = %v, golang.org/x/sys/cpu HasAVX512VPCLMULQDQ = %v", hasVPCLMULQDQ(), cpu.X86.HasAVX512VPCLMULQDQ)
	}
	want := foldNone
	switch {
	case cpu.X86.HasAVX512F && cpu.X86.HasAVX512VPCLMULQDQ:
		want = foldAVX512
	case cpu.X86.HasAVX2 && hasVPCLMULQDQ():
		want = foldAVX2
	}
	if fold != want {
		t.Errorf("fold %d, want %d (folds %v)", fold, want, folds)
	}
	t.Logf("AVX2 %v, VPCLMULQDQ %v, AVX-512F %v: fold %d", cpu.X86.HasAVX2, hasVPCLMULQDQ(), cpu.X86.HasAVX512F, fold)
}
