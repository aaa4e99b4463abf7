package wire

import "hash/crc32"

// shortCRC is the length below which rawUpdate's table steps beat a call
// into hash/crc32 (whose own carry-less multiply takes over from 64 bytes
// on amd64, and which goes through a sync.Once on every call).
const shortCRC = 64

// crcUpdateStd is hash/crc32's IEEE update.
func crcUpdateStd(crc uint32, p []byte) uint32 { return crc32.Update(crc, crc32.IEEETable, p) }
