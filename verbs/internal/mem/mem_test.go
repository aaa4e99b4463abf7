package mem

import "testing"

func TestLookupChecks(t *testing.T) {
	tb := New(4)
	buf := make([]byte, 100)
	r, ok := tb.Register(buf, AddrOf(buf), LocalWrite|RemoteRead, 1)
	if !ok {
		t.Fatal("register failed")
	}
	cases := []struct {
		name string
		key  uint32
		pd   uint32
		va   uint64
		n    uint64
		need uint32
		want Status
	}{
		{"whole", r.Key, 1, r.VA, 100, RemoteRead, OK},
		{"empty at end", r.Key, 1, r.VA + 100, 0, RemoteRead, OK},
		{"bad key", r.Key + 1, 1, r.VA, 1, 0, BadKey},
		{"other pd", r.Key, 2, r.VA, 1, 0, BadPD},
		{"no write right", r.Key, 1, r.VA, 1, RemoteWrite, NoAccess},
		{"before start", r.Key, 1, r.VA - 1, 1, 0, OutOfRange},
		{"past end", r.Key, 1, r.VA + 99, 2, 0, OutOfRange},
		{"overflowing length", r.Key, 1, r.VA + 1, ^uint64(0), 0, OutOfRange},
		{"far address", r.Key, 1, ^uint64(0) - 1, 1, 0, OutOfRange},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, st := tb.Lookup(c.key, c.pd, c.va, c.n, c.need)
			if st != c.want {
				t.Fatalf("status %v, want %v", st, c.want)
			}
			if st == OK && uint64(len(b)) != c.n {
				t.Fatalf("len %d, want %d", len(b), c.n)
			}
		})
	}
	if !tb.Deregister(r.Key) {
		t.Fatal("deregister failed")
	}
	if _, st := tb.Lookup(r.Key, 1, r.VA, 1, 0); st != BadKey {
		t.Fatalf("after deregister: %v, want BadKey", st)
	}
}

func TestKeysUnpredictableAndLimited(t *testing.T) {
	tb := New(1000)
	seen := map[uint32]bool{}
	var prev uint32
	sequential := 0
	for i := 0; i < 1000; i++ {
		r, ok := tb.Register(make([]byte, 1), 0x1000, 0, 1)
		if !ok {
			t.Fatal("register failed below the limit")
		}
		if seen[r.Key] || r.Key == 0 {
			t.Fatalf("key %#x reused or zero", r.Key)
		}
		if r.Key == prev+1 || r.Key == prev+256 {
			sequential++
		}
		seen[r.Key] = true
		prev = r.Key
	}
	if sequential > 2 {
		t.Errorf("%d keys followed their predecessor by 1 or 256", sequential)
	}
	if _, ok := tb.Register(make([]byte, 1), 0x1000, 0, 1); ok {
		t.Error("registered past the limit")
	}
}

func TestRegisterAt(t *testing.T) {
	tb := New(2)
	buf := make([]byte, 64)
	r, ok := tb.RegisterAt(buf, 0x7f0000001000, 0x2ba, RemoteRead, 1)
	if !ok || r.Key != 0x2ba || r.VA != 0x7f0000001000 {
		t.Fatalf("RegisterAt: %+v, %v", r, ok)
	}
	buf[8] = 42
	if b, st := tb.Lookup(0x2ba, 1, 0x7f0000001008, 1, RemoteRead); st != OK || b[0] != 42 {
		t.Fatalf("lookup at the chosen address: %v", st)
	}
	if _, ok := tb.RegisterAt(buf, 0, 0x2ba, 0, 1); ok {
		t.Fatal("a key in use was registered again")
	}
	if _, ok := tb.RegisterAt(buf, 0, 0, 0, 1); ok {
		t.Fatal("key 0 was registered")
	}
}

// TestKeysNotReusedSoon registers and deregisters many regions one at a
// time: no key comes back within Quarantine registrations, keys are never
// sequential, and every key bit is set about half the time.
func TestKeysNotReusedSoon(t *testing.T) {
	tb := New(16)
	const n = 3 * Quarantine
	keys := make([]uint32, 0, n)
	last := map[uint32]int{}
	var ones [32]int
	sequential := 0
	for i := range n {
		r, ok := tb.Register(make([]byte, 8), 0x1000, RemoteWrite, 1)
		if !ok {
			t.Fatal("register failed")
		}
		if j, seen := last[r.Key]; seen && i-j <= Quarantine {
			t.Fatalf("key %#x handed out again %d registrations later", r.Key, i-j)
		}
		if i > 0 {
			if d := r.Key - keys[i-1]; d == 1 || d == 256 || d == 1<<24 {
				sequential++
			}
		}
		last[r.Key] = i
		keys = append(keys, r.Key)
		for b := range 32 {
			ones[b] += int(r.Key >> b & 1)
		}
		if !tb.Deregister(r.Key) {
			t.Fatal("deregister failed")
		}
	}
	if sequential > 2 {
		t.Errorf("%d of %d keys followed their predecessor by 1, 256 or 2^24", sequential, n)
	}
	// Binomial(n, 1/2): mean n/2, standard deviation sqrt(n)/2 ≈ 55; a
	// bit outside 6 standard deviations is not random.
	for b, c := range ones {
		if c < n/2-6*55 || c > n/2+6*55 {
			t.Errorf("key bit %d was set in %d of %d keys", b, c, n)
		}
	}
}
