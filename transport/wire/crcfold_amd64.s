//go:build !purego

#include "textflag.h"

// func ieeeFold4(raw uint32, p []byte, k *foldConstants) (lo, hi uint64)
//
// Folds p (a multiple of 256 bytes, at least 256) into 16 bytes with the
// same reflected CRC-32 remainder, starting from register value raw: four
// independent 512-bit accumulators, each folded forward by 2048 bits per
// step (k.step), then all sixteen 128-bit lanes folded onto the last one
// (k.lanes). See crcfold_amd64.go.
TEXT ·ieeeFold4(SB), NOSPLIT, $0-56
	MOVL raw+0(FP), AX
	MOVQ p_base+8(FP), SI
	MOVQ p_len+16(FP), CX
	MOVQ k+32(FP), DX

	VMOVD     AX, X10 // zeroes the rest of Z10
	VMOVDQU64 0(SI), Z1
	VPXORQ    Z10, Z1, Z1 // the initial register goes into the first four bytes
	VMOVDQU64 64(SI), Z2
	VMOVDQU64 128(SI), Z3
	VMOVDQU64 192(SI), Z4
	ADDQ      $256, SI
	SUBQ      $256, CX
	VMOVDQU64 0(DX), Z0 // step constants, the same in every lane

loop:
	CMPQ       CX, $256
	JB         lanes
	VMOVDQU64  0(SI), Z11
	VMOVDQU64  64(SI), Z12
	VMOVDQU64  128(SI), Z13
	VMOVDQU64  192(SI), Z14
	VPCLMULQDQ $0x11, Z0, Z1, Z5
	VPCLMULQDQ $0x00, Z0, Z1, Z1
	VPCLMULQDQ $0x11, Z0, Z2, Z6
	VPCLMULQDQ $0x00, Z0, Z2, Z2
	VPCLMULQDQ $0x11, Z0, Z3, Z7
	VPCLMULQDQ $0x00, Z0, Z3, Z3
	VPCLMULQDQ $0x11, Z0, Z4, Z8
	VPCLMULQDQ $0x00, Z0, Z4, Z4
	VPTERNLOGD $0x96, Z11, Z5, Z1
	VPTERNLOGD $0x96, Z12, Z6, Z2
	VPTERNLOGD $0x96, Z13, Z7, Z3
	VPTERNLOGD $0x96, Z14, Z8, Z4
	ADDQ       $256, SI
	SUBQ       $256, CX
	JMP        loop

lanes:
	// Lane j of the sixteen moves forward by (15-j)*128 bits; the last
	// one stays (its constants are zero, so it is added back as is).
	VEXTRACTI32X4 $3, Z4, X9
	VMOVDQU64     64(DX), Z15
	VMOVDQU64     128(DX), Z16
	VMOVDQU64     192(DX), Z17
	VMOVDQU64     256(DX), Z18
	VPCLMULQDQ    $0x11, Z15, Z1, Z5
	VPCLMULQDQ    $0x00, Z15, Z1, Z1
	VPCLMULQDQ    $0x11, Z16, Z2, Z6
	VPCLMULQDQ    $0x00, Z16, Z2, Z2
	VPCLMULQDQ    $0x11, Z17, Z3, Z7
	VPCLMULQDQ    $0x00, Z17, Z3, Z3
	VPCLMULQDQ    $0x11, Z18, Z4, Z8
	VPCLMULQDQ    $0x00, Z18, Z4, Z4
	VPTERNLOGD    $0x96, Z5, Z2, Z1
	VPTERNLOGD    $0x96, Z6, Z3, Z1
	VPTERNLOGD    $0x96, Z7, Z4, Z1
	VPXORQ        Z8, Z1, Z1
	VEXTRACTI32X4 $1, Z1, X2
	VEXTRACTI32X4 $2, Z1, X3
	VEXTRACTI32X4 $3, Z1, X4
	VPXOR         X2, X1, X1
	VPXOR         X3, X1, X1
	VPXOR         X4, X1, X1
	VPXOR         X9, X1, X1
	VMOVQ         X1, AX
	VPEXTRQ       $1, X1, BX
	MOVQ          AX, lo+40(FP)
	MOVQ          BX, hi+48(FP)
	VZEROUPPER
	RET

// FOLD8 folds accumulator acc forward by 2048 bits (constants in Y0) and
// adds the 32 bytes at off(SI).
#define FOLD8(off, acc, tmp) \
	VPCLMULQDQ $0x11, Y0, acc, tmp; \
	VPCLMULQDQ $0x00, Y0, acc, acc; \
	VPXOR      off(SI), acc, acc; \
	VPXOR      tmp, acc, acc

// LANE8 moves the two lanes of acc forward by the constants at koff(DX).
#define LANE8(koff, acc, k, tmp) \
	VMOVDQU    koff(DX), k; \
	VPCLMULQDQ $0x11, k, acc, tmp; \
	VPCLMULQDQ $0x00, k, acc, acc; \
	VPXOR      tmp, acc, acc

// func ieeeFold8(raw uint32, p []byte, k *foldConstants) (lo, hi uint64)
//
// ieeeFold4 for CPUs with VPCLMULQDQ but without AVX-512 (AVX2, VEX
// encoding): the same sixteen 128-bit lanes and constants, held in eight
// 256-bit accumulators instead of four 512-bit ones.
TEXT ·ieeeFold8(SB), NOSPLIT, $0-56
	MOVL raw+0(FP), AX
	MOVQ p_base+8(FP), SI
	MOVQ p_len+16(FP), CX
	MOVQ k+32(FP), DX

	VMOVD   AX, X10 // zeroes the rest of Y10
	VMOVDQU 0(SI), Y1
	VPXOR   Y10, Y1, Y1 // the initial register goes into the first four bytes
	VMOVDQU 32(SI), Y2
	VMOVDQU 64(SI), Y3
	VMOVDQU 96(SI), Y4
	VMOVDQU 128(SI), Y5
	VMOVDQU 160(SI), Y6
	VMOVDQU 192(SI), Y7
	VMOVDQU 224(SI), Y8
	ADDQ    $256, SI
	SUBQ    $256, CX
	VMOVDQU 0(DX), Y0 // step constants, the same in both lanes

loop8:
	CMPQ CX, $256
	JB   lanes8
	FOLD8(0, Y1, Y9)
	FOLD8(32, Y2, Y10)
	FOLD8(64, Y3, Y11)
	FOLD8(96, Y4, Y12)
	FOLD8(128, Y5, Y13)
	FOLD8(160, Y6, Y14)
	FOLD8(192, Y7, Y15)
	FOLD8(224, Y8, Y9)
	ADDQ $256, SI
	SUBQ $256, CX
	JMP  loop8

lanes8:
	// As in ieeeFold4: lane j moves forward by (15-j)*128 bits, lane 15
	// (the upper half of Y8, zero constants) is added back as is.
	VEXTRACTI128 $1, Y8, X15
	LANE8(64, Y1, Y9, Y13)
	LANE8(96, Y2, Y10, Y14)
	LANE8(128, Y3, Y11, Y13)
	LANE8(160, Y4, Y12, Y14)
	LANE8(192, Y5, Y9, Y13)
	LANE8(224, Y6, Y10, Y14)
	LANE8(256, Y7, Y11, Y13)
	LANE8(288, Y8, Y12, Y14)
	VPXOR        Y2, Y1, Y1
	VPXOR        Y4, Y3, Y3
	VPXOR        Y6, Y5, Y5
	VPXOR        Y8, Y7, Y7
	VPXOR        Y3, Y1, Y1
	VPXOR        Y7, Y5, Y5
	VPXOR        Y5, Y1, Y1
	VEXTRACTI128 $1, Y1, X2
	VPXOR        X2, X1, X1
	VPXOR        X15, X1, X1
	VMOVQ        X1, AX
	VPEXTRQ      $1, X1, BX
	MOVQ         AX, lo+40(FP)
	MOVQ         BX, hi+48(FP)
	VZEROUPPER
	RET

// func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)
TEXT ·cpuid(SB), NOSPLIT, $0-24
	MOVL leaf+0(FP), AX
	MOVL sub+4(FP), CX
	CPUID
	MOVL AX, eax+8(FP)
	MOVL BX, ebx+12(FP)
	MOVL CX, ecx+16(FP)
	MOVL DX, edx+20(FP)
	RET
