//go:build unix

package verbs

import (
	"fmt"

	"golang.org/x/sys/unix"
)

func allocBuffer(n int) ([]byte, error) {
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("verbs: allocate %d-byte buffer: %w", n, err)
	}
	return b, nil
}

func freeBuffer(b []byte) error {
	if err := unix.Munmap(b); err != nil {
		return fmt.Errorf("verbs: free buffer: %w", err)
	}
	return nil
}
