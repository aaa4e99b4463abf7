package e2e

import (
	"context"
	"crypto/sha256"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestCatThroughServe: B runs "tbrdma serve", which holds UDP 4791 on its
// address, and "tbrdma cat" receivers that get their streams through it
// (the cat relay, issue #17), as separate processes: the stream arrives
// intact and silently, "| head -c 100" ends both ends, a receiver killed
// mid-stream has serve drop its sender, a second receiver on the port is
// refused, and a receiver whose serve is killed exits 1 saying so.
func TestCatThroughServe(t *testing.T) {
	l := newVethLink(t, "cs", "198.18.12.1", "198.18.12.2", "198.18.12.3")
	serve := l.start(t, l.nsB, "", "serve", "--no-advertise")
	serve.waitLine(t, "listening on "+l.addrB+" port 7174", 10*time.Second)

	// receiver starts "tbrdma cat" in B with stdout on out and waits until
	// serve listens for it.
	receiver := func(t *testing.T, out *os.File, args ...string) *proc {
		t.Helper()
		p := l.startOut(t, l.nsB, "", out, append([]string{"cat"}, args...)...)
		serve.waitLine(t, "(relayed)", 10*time.Second)
		return p
	}
	// sender starts "tbrdma cat B" in A, fed by in (closed at its end).
	sender := func(t *testing.T, ctx context.Context, in io.Reader) (*exec.Cmd, *strings.Builder) {
		t.Helper()
		send := l.command(ctx, t, l.nsA, "", "cat", l.addrB)
		stdin, err := send.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		var errOut strings.Builder
		send.Stderr = &errOut
		if err := send.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { io.Copy(stdin, in); stdin.Close() }()
		return send, &errOut
	}

	t.Run("64 MiB", func(t *testing.T) {
		const size = 64 << 20
		recv := receiver(t, nil)
		ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
		defer cancel()
		sh := sha256.New()
		send, sendErr := sender(t, ctx, io.TeeReader(io.LimitReader(rand.NewChaCha8([32]byte{12}), size), sh))
		code := exitCode(send.Wait())
		rcode := recv.wait(t, 30*time.Second)
		got := recv.stdout.bytes()
		if code != 0 || rcode != 0 {
			t.Fatalf("sender exit %d (%s), receiver exit %d (%s)", code, sendErr, rcode, recv.errText())
		}
		if rh := sha256.Sum256(got); len(got) != size || string(rh[:]) != string(sh.Sum(nil)) {
			t.Fatalf("received %d bytes (SHA-256 %x), sent %d (%x)", len(got), rh[:8], size, sh.Sum(nil)[:8])
		}
		if sendErr.Len() != 0 || recv.errText() != "" {
			t.Errorf("a pipeline that works is silent, got stderr: sender %q, receiver %q", sendErr, recv.errText())
		}
		serve.waitLine(t, "67108864 bytes written out, verdict ok", 10*time.Second)
	})

	t.Run("output closed", func(t *testing.T) {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		recv := receiver(t, w)
		w.Close()
		ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
		defer cancel()
		send, sendErr := sender(t, ctx, rand.NewChaCha8([32]byte{13}))
		head := make([]byte, 100) // as head -c 100 does: read, then close
		if _, err := io.ReadFull(r, head); err != nil {
			t.Fatalf("read the receiver's output: %v (%s)", err, recv.errText())
		}
		r.Close()
		code := exitCode(send.Wait())
		rcode := recv.wait(t, 30*time.Second)
		if rcode != 1 || !strings.Contains(recv.errText(), "tbrdma: cat: the output closed after ") {
			t.Errorf("receiver: exit %d, want 1 and the closed output: %q", rcode, recv.errText())
		}
		if code != 1 || !strings.Contains(sendErr.String(), "tbrdma: cat: the receiver's output closed after ") {
			t.Errorf("sender: exit %d, want 1 and the receiver's closed output: %q", code, sendErr)
		}
	})

	t.Run("receiver killed", func(t *testing.T) {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		recv := receiver(t, w)
		w.Close()
		var got atomic.Int64
		go func() {
			buf := make([]byte, 1<<16)
			for {
				n, err := r.Read(buf)
				got.Add(int64(n))
				if err != nil {
					return
				}
			}
		}()
		ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
		defer cancel()
		send, sendErr := sender(t, ctx, rand.NewChaCha8([32]byte{14}))
		for got.Load() < 8<<20 {
			select {
			case <-recv.done:
				t.Fatalf("the receiver ended early (%v): %s", recv.err, recv.errText())
			case <-ctx.Done():
				t.Fatal("no 8 MiB received within 90s")
			case <-time.After(10 * time.Millisecond):
			}
		}
		recv.cmd.Process.Kill()
		code := exitCode(send.Wait())
		if ctx.Err() != nil {
			t.Fatalf("the sender did not end within 90s of the receiver's death: %s", sendErr)
		}
		if code != 1 || !strings.Contains(sendErr.String(), "tbrdma: cat: the receiver disconnected after ") {
			t.Errorf("sender after the receiver was killed: exit %d, want 1 and the receiver's disconnection: %q", code, sendErr)
		}
		serve.waitLine(t, "the cat went away without a verdict", 10*time.Second)
	})

	t.Run("second receiver, serve killed", func(t *testing.T) {
		recv := receiver(t, nil)
		r := l.run(t, l.nsB, 10*time.Second, "cat")
		if r.code != 1 || !strings.Contains(r.stderr, "already waits for a stream on port 18516 through it") {
			t.Errorf("second receiver: %v", r)
		}
		serve.cmd.Process.Kill()
		rcode := recv.wait(t, 10*time.Second)
		if rcode != 1 || !strings.Contains(recv.errText(), "which relays for this cat, went away") {
			t.Errorf("receiver after serve was killed: exit %d, want 1 and serve gone: %q", rcode, recv.errText())
		}
	})
}

// TestCatThroughServeRate measures 1 GiB through cat, to a receiver of its
// own and to one behind serve, on the same link in the same run, and logs
// the ratio (docs/performance.md). A measurement: run it by name with
// TBRDMA_CAT_RATE=1.
func TestCatThroughServeRate(t *testing.T) {
	if os.Getenv("TBRDMA_CAT_RATE") == "" {
		t.Skip("a measurement: set TBRDMA_CAT_RATE=1")
	}
	l := newVethLink(t, "cr", "198.18.13.1", "198.18.13.2", "198.18.13.3")
	if err := ipCmd("-n", l.nsB, "addr", "add", "198.18.13.4/29", "dev", "thunderbolt0"); err != nil {
		t.Fatal(err)
	}
	serve := l.start(t, l.nsB, "", "serve", "--no-advertise", "--bind", l.addrB)
	serve.waitLine(t, "listening on "+l.addrB+" port 7174", 10*time.Second)
	const size = 1 << 30
	once := func(addr string, relayed bool) time.Duration {
		null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer null.Close()
		recv := l.startOut(t, l.nsB, "", null, "cat", "--bind", addr)
		if relayed {
			serve.waitLine(t, "(relayed)", 10*time.Second)
		} else {
			waitUDP(t, l.nsB, addr, recv)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
		defer cancel()
		send := l.command(ctx, t, l.nsA, "", "cat", addr)
		zero, err := os.Open("/dev/zero")
		if err != nil {
			t.Fatal(err)
		}
		defer zero.Close()
		send.Stdin = io.LimitReader(zero, size)
		start := time.Now()
		out, err := send.CombinedOutput()
		d := time.Since(start)
		if err != nil || recv.wait(t, time.Minute) != 0 {
			t.Fatalf("cat to %s: %v %s; receiver: %s", addr, err, out, recv.errText())
		}
		return d
	}
	var direct, relayed time.Duration
	for range 2 { // alternated, the best of two each
		if d := once("198.18.13.4", false); direct == 0 || d < direct {
			direct = d
		}
		if d := once(l.addrB, true); relayed == 0 || d < relayed {
			relayed = d
		}
	}
	rate := func(d time.Duration) float64 { return size / d.Seconds() / (1 << 20) }
	t.Logf("1 GiB: to a receiver of its own %.0f MiB/s (%v), through serve %.0f MiB/s (%v): ratio %.2f",
		rate(direct), direct.Round(time.Millisecond), rate(relayed), relayed.Round(time.Millisecond), direct.Seconds()/relayed.Seconds())
}
