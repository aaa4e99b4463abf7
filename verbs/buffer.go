package verbs

import "fmt"

// AllocBuffer returns a zeroed buffer of at least n bytes whose first byte
// is page-aligned, for registration with RegMR. On Unix systems it is an
// anonymous memory mapping outside the Go heap, as perftest allocates its
// buffers; FreeBuffer unmaps it once it is deregistered. Elsewhere it is
// an aligned slice of a Go allocation.
func AllocBuffer(n int) ([]byte, error) {
	if n <= 0 {
		return nil, fmt.Errorf("verbs: allocate buffer: size %d: %w", n, ErrInvalidArgument)
	}
	return allocBuffer(n)
}

// FreeBuffer releases a buffer from AllocBuffer. The buffer must not be
// registered any more and must not be used afterwards.
func FreeBuffer(b []byte) error { return freeBuffer(b) }
