package rdmacm

import (
	"encoding/binary"

	"github.com/tbrdma/tbrdma/verbs"
)

// The large-segment trailer (docs/wire-format.md, "Large-segment mode"):
// tbrdma's way of agreeing on verbs' large-segment extension in the CM
// exchange itself. The offering side puts eight bytes at the very end of
// the REQ's private data, and the accepting side answers with the same in
// the REP's:
//
//	"tbSG" (74 62 53 47) | version 1 | 0 | segment size in KiB (big-endian uint16)
//
// Only a side whose application asked for it (ConnParam.SegmentSize)
// writes a trailer, and a side answers only a trailer it received, so a
// stock peer never receives one unless the application offers to it; if
// it does, the stock peer sees eight more bytes of private data (the
// application's limit shrinks by eight) and answers none, and the
// connection is a standard one.

const (
	segTrailerLen     = 8
	segTrailerVersion = 1
)

var segTrailerMagic = [4]byte{'t', 'b', 'S', 'G'}

// putSegTrailer writes the trailer for size bytes at the end of pd.
func putSegTrailer(pd []byte, size int) {
	t := pd[len(pd)-segTrailerLen:]
	copy(t, segTrailerMagic[:])
	t[4], t[5] = segTrailerVersion, 0
	binary.BigEndian.PutUint16(t[6:], uint16(size/1024))
}

// segTrailer returns the segment size a trailer at the end of pd offers,
// or 0 when there is none or it offers no valid size.
func segTrailer(pd []byte) int {
	if len(pd) < segTrailerLen {
		return 0
	}
	t := pd[len(pd)-segTrailerLen:]
	if [4]byte(t[:4]) != segTrailerMagic || t[4] != segTrailerVersion || t[5] != 0 {
		return 0
	}
	n := int(binary.BigEndian.Uint16(t[6:])) * 1024
	if !verbs.ValidSegmentSize(n) {
		return 0
	}
	return n
}

// stripSegTrailer zeroes a valid trailer at the end of pd, so that the
// application sees its own private data only, and returns the size it
// offered (0 and pd untouched without one).
func stripSegTrailer(pd []byte) int {
	n := segTrailer(pd)
	if n != 0 {
		clear(pd[len(pd)-segTrailerLen:])
	}
	return n
}

// agreeSegment is the segment size both sides can use: the smaller of the
// two offers, and at most what the context allows once enabled for it.
func agreeSegment(vctx *verbs.Context, mine, theirs int) int {
	if mine == 0 || theirs == 0 {
		return 0
	}
	n := min(mine, theirs)
	if vctx.MaxSegmentSize() < n {
		if err := vctx.SetMaxSegmentSize(n); err != nil {
			return 0
		}
	}
	return n
}
