package e2e

import (
	"context"
	"crypto/sha256"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// TestFaultFlag: the CLI's --fault test mode between two processes on a
// Thunderbolt veth. cat moves 16 MiB while both ends lose, duplicate,
// reorder, delay and corrupt packets (seeded): every byte arrives once and
// in order (SHA-256 equal), both exit 0, and each says once on stderr that
// it injects faults and with which seed. A bad --fault value is a usage
// error (exit 2).
func TestFaultFlag(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: network namespaces")
	}
	l := newFailLink(t)
	const size = 16 << 20
	fault := func(seed string) string {
		return "--fault=loss=2%,dup=1%,corrupt=1%,reorder=2%,delay=200us,jitter=300us,seed=" + seed
	}
	recv := l.start(t, l.nsB, "", fault("11"), "cat", "--bind", failAddrB)
	waitUDP(t, l.nsB, failAddrB, recv)
	ctx, cancel := context.WithTimeout(t.Context(), 120*time.Second)
	defer cancel()
	send := l.command(ctx, t, l.nsA, "", fault("12"), "cat", failAddrB)
	stdin, err := send.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var sendErr lockedBuffer
	send.Stderr = &sendErr
	if err := send.Start(); err != nil {
		t.Fatal(err)
	}
	sh := sha256.New()
	if _, err := io.CopyN(io.MultiWriter(stdin, sh), rand.NewChaCha8([32]byte{7}), size); err != nil {
		t.Fatalf("write to cat's stdin: %v (%s)", err, sendErr.String())
	}
	stdin.Close()
	code := exitCode(send.Wait())
	if ctx.Err() != nil {
		t.Fatal("the sender did not end within 120 s")
	}
	rcode := recv.wait(t, 30*time.Second)
	got := recv.stdout.bytes()
	if code != 0 || rcode != 0 {
		t.Fatalf("cat under faults: sender exit %d (%s), receiver exit %d (%s)", code, sendErr.String(), rcode, recv.errText())
	}
	if len(got) != size || sha256.Sum256(got) != [32]byte(sh.Sum(nil)) {
		t.Fatalf("received %d bytes (sent %d), or their SHA-256 differs", len(got), size)
	}
	for side, stderr := range map[string]string{"sender": sendErr.String(), "receiver": recv.errText()} {
		if strings.Count(stderr, "injecting faults on") != 1 || !strings.Contains(stderr, "seed=1") {
			t.Errorf("%s: stderr should say once that it injects faults, with the seed: %q", side, stderr)
		}
	}
	t.Logf("cat: %d MiB with loss, duplication, corruption, reordering, delay and jitter on both ends: SHA-256 equal", size>>20)

	r := l.run(t, l.nsA, 10*time.Second, "--fault", "loss=150%", "devices")
	if r.code != 2 || !strings.Contains(r.stderr, "probability") {
		t.Errorf("--fault loss=150%%: exit %d, stderr %q; want a usage error (2) about the probability", r.code, r.stderr)
	}
}
