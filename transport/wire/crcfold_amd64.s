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
