package wire

import (
	"encoding/binary"
	"hash/crc32"
)

// shortCRC is the length below which rawUpdate's table steps beat a call
// into hash/crc32 (whose own carry-less multiply takes over from 64 bytes
// on amd64, and which goes through a sync.Once on every call).
const shortCRC = 64

// crcUpdateStd is hash/crc32's IEEE update.
func crcUpdateStd(crc uint32, p []byte) uint32 { return crc32.Update(crc, crc32.IEEETable, p) }

// crcRawSmall advances the (not inverted) CRC-32 register r over the 16
// bytes of b, eight at a time (slicing-by-8), without letting b escape.
func crcRawSmall(r uint32, b *[16]byte) uint32 {
	t := &slicing8
	for i := 0; i < 16; i += 8 {
		r ^= binary.LittleEndian.Uint32(b[i:])
		hi := binary.LittleEndian.Uint32(b[i+4:])
		r = t[0][hi>>24] ^ t[1][(hi>>16)&0xff] ^ t[2][(hi>>8)&0xff] ^ t[3][hi&0xff] ^
			t[4][r>>24] ^ t[5][(r>>16)&0xff] ^ t[6][(r>>8)&0xff] ^ t[7][r&0xff]
	}
	return r
}
