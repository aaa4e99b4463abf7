//go:build !amd64 || purego

package wire

const foldNone = 0

// folds are the folds this CPU has (none but hash/crc32 here).
var folds = []int{foldNone}

// crcUpdate is crc32.Update(crc, crc32.IEEETable, p).
func crcUpdate(crc uint32, p []byte) uint32 { return crcUpdateStd(crc, p) }

// crcUpdateWith is crcUpdate.
func crcUpdateWith(_ int, crc uint32, p []byte) uint32 { return crcUpdateStd(crc, p) }
