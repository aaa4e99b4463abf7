//go:build !amd64 || purego

package wire

const haveFold = false

// crcUpdate is crc32.Update(crc, crc32.IEEETable, p).
func crcUpdate(crc uint32, p []byte) uint32 { return crcUpdateStd(crc, p) }
