//go:build !unix

package verbs

import (
	"os"
	"unsafe"
)

func allocBuffer(n int) ([]byte, error) {
	page := os.Getpagesize()
	raw := make([]byte, n+page)
	off := (page - int(uintptr(unsafe.Pointer(&raw[0])))%page) % page
	return raw[off : off+n : off+n], nil
}

func freeBuffer([]byte) error { return nil }
