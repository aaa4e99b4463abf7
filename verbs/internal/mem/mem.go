// Package mem is the memory region table of a verbs context: key
// generation, and the bounds, access and protection-domain checks every
// local and remote access passes before a byte moves.
package mem

import (
	crand "crypto/rand"
	"encoding/binary"
	"math/rand/v2"
	"sync"
	"unsafe"
)

// Access rights, numbered as verbs.AccessFlags.
const (
	LocalWrite   = 1
	RemoteWrite  = 2
	RemoteRead   = 4
	RemoteAtomic = 8
)

// Status is the outcome of a lookup.
type Status uint8

const (
	OK         Status = iota
	BadKey            // no region has this key (or it was deregistered)
	BadPD             // the region belongs to another protection domain
	NoAccess          // the region does not grant the access
	OutOfRange        // [va, va+len) is not inside the region
)

// Region is a registered memory region.
type Region struct {
	Buf    []byte
	VA     uint64 // virtual address of Buf[0]
	Key    uint32 // lkey and rkey
	Access uint32
	PD     uint32
}

// Quarantine is how many recently deregistered keys Register never hands
// out again: a late request that names an old key finds no region (and
// gets a remote access error) instead of finding whatever region was
// registered since. Random 32-bit keys alone would hit one of the last
// 4096 keys about once in a million registrations.
const Quarantine = 4096

// Table maps keys to regions. The zero value is not usable; use New.
type Table struct {
	mu      sync.RWMutex
	regions map[uint32]*Region
	rng     *rand.Rand
	limit   int
	// recent holds the last Quarantine deregistered keys, oldest at
	// recent[next] once the ring is full; inRecent counts them.
	recent   []uint32
	next     int
	inRecent map[uint32]int
}

// New returns an empty table that holds at most limit regions.
func New(limit int) *Table {
	var seed [32]byte
	if _, err := crand.Read(seed[:]); err != nil {
		binary.LittleEndian.PutUint64(seed[:], rand.Uint64())
	}
	return &Table{regions: make(map[uint32]*Region), rng: rand.New(rand.NewChaCha8(seed)), limit: limit,
		inRecent: make(map[uint32]int)}
}

// AddrOf returns the virtual address of b[0] (0 for an empty slice).
func AddrOf(b []byte) uint64 {
	if len(b) == 0 {
		return 0
	}
	return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b))))
}

// Register adds a region for buf, answering at virtual address va
// (normally AddrOf(buf)), and returns it. Keys are drawn at random
// from a cryptographic seed, so a peer cannot guess one; 0, keys in use
// and the last Quarantine deregistered keys are never handed out. ok is
// false when the table is full.
func (t *Table) Register(buf []byte, va uint64, access, pd uint32) (r *Region, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.regions) >= t.limit {
		return nil, false
	}
	var key uint32
	for key == 0 || t.regions[key] != nil || t.inRecent[key] > 0 {
		key = t.rng.Uint32()
	}
	r = &Region{Buf: buf, VA: va, Key: key, Access: access, PD: pd}
	t.regions[key] = r
	return r, true
}

// RegisterAt adds a region for buf that answers to a chosen key and
// virtual address instead of a random key and buf's real address. It exists
// for verbs' tests, which replay captured traffic that names the peer's
// keys and addresses; nothing else may use it. ok is false when key is 0
// or in use, or the table is full.
func (t *Table) RegisterAt(buf []byte, va uint64, key, access, pd uint32) (r *Region, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if key == 0 || t.regions[key] != nil || len(t.regions) >= t.limit {
		return nil, false
	}
	r = &Region{Buf: buf, VA: va, Key: key, Access: access, PD: pd}
	t.regions[key] = r
	return r, true
}

// Deregister removes the region with key. After it returns no lookup finds
// the region, and no access to it is in progress.
func (t *Table) Deregister(key uint32) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.regions[key] == nil {
		return false
	}
	delete(t.regions, key)
	t.quarantine(key)
	return true
}

// quarantine remembers key among the recently deregistered ones. t.mu is
// held.
func (t *Table) quarantine(key uint32) {
	if len(t.recent) < Quarantine {
		t.recent = append(t.recent, key)
	} else {
		old := t.recent[t.next]
		if t.inRecent[old]--; t.inRecent[old] <= 0 {
			delete(t.inRecent, old)
		}
		t.recent[t.next] = key
		t.next = (t.next + 1) % Quarantine
	}
	t.inRecent[key]++
}

// Len returns the number of registered regions.
func (t *Table) Len() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.regions)
}

// RLock holds off deregistration while the caller copies through slices
// returned by Lookup; RUnlock ends that.
func (t *Table) RLock()   { t.mu.RLock() }
func (t *Table) RUnlock() { t.mu.RUnlock() }

// Lookup returns the n bytes at va in the region named by key, checking
// the protection domain and that the region grants every right in need
// (0 for a local read). The caller must hold RLock while it uses the slice.
func (t *Table) Lookup(key uint32, pd uint32, va uint64, n uint64, need uint32) ([]byte, Status) {
	r := t.regions[key]
	if r == nil {
		return nil, BadKey
	}
	if r.PD != pd {
		return nil, BadPD
	}
	if r.Access&need != need {
		return nil, NoAccess
	}
	if va < r.VA {
		return nil, OutOfRange
	}
	off := va - r.VA
	size := uint64(len(r.Buf))
	if off > size || n > size-off {
		return nil, OutOfRange
	}
	return r.Buf[off : off+n : off+n], OK
}
