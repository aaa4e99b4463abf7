package cli

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/tbrdma/tbrdma/verbs"
)

// TestLiveCountersPublish: a published context's file appears (0600 in a
// 0700 directory) with its counters, follows them as packets arrive, and
// is removed once the context is closed and the command returns.
func TestLiveCountersPublish(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("XDG_RUNTIME_DIR", dir)
	ldir := filepath.Join(dir, "tbrdma")
	ctx, err := openDevice(loopbackAddr(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	publishCounters(ctx, "serve")

	path := filepath.Join(ldir, strconv.Itoa(os.Getpid())+".json")
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatalf("no counter file after publishing: %v", err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("counter file mode %v, want 0600", fi.Mode().Perm())
	}
	if di, err := os.Stat(ldir); err != nil || di.Mode().Perm() != 0o700 {
		t.Errorf("counter directory: %v, %v; want mode 0700", di.Mode(), err)
	}
	files, err := readLive(ldir, time.Now())
	if err != nil || len(files) != 1 || files[0].PID != os.Getpid() || files[0].Command != "serve" ||
		len(files[0].Contexts) != 1 || files[0].Contexts[0].Addr != ctx.LocalAddr().Addr().String() {
		t.Fatalf("readLive: %+v, %v", files, err)
	}
	before := files[0].Contexts[0].Counters["packets_in"]

	// Three packets (garbage: counted in, dropped as short) to the
	// context's UDP port; the file must show them within a few periods.
	c, err := net.Dial("udp", ctx.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for range 3 {
		if _, err := c.Write([]byte{1, 2, 3}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(20 * livePeriod)
	for {
		files, _ = readLive(ldir, time.Now())
		if len(files) == 1 {
			k := files[0].Contexts[0].Counters
			if k["packets_in"]+k["drop_short"] >= before+3 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the counter file never showed the 3 packets: %+v", files)
		}
		time.Sleep(livePeriod / 4)
	}

	ctx.Close()
	live.flush()
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("counter file still there after the context closed: %v", err)
	}
}

// TestLiveCountersStale: files of dead processes and stale ones are
// ignored and deleted; others' garbage is ignored.
func TestLiveCountersStale(t *testing.T) {
	dir := t.TempDir()
	// A PID that is surely gone: a child that has exited and been reaped.
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	dead := cmd.Process.Pid
	now := time.Now()
	write := func(pid int, f liveFile) string {
		p := filepath.Join(dir, strconv.Itoa(pid)+".json")
		if err := writeLiveFile(dir, p, &f); err != nil {
			t.Fatal(err)
		}
		return p
	}
	me := os.Getpid()
	deadPath := write(dead, liveFile{SchemaVersion: 1, PID: dead, Updated: now})
	stalePath := write(me, liveFile{SchemaVersion: 1, PID: me, Updated: now.Add(-2 * liveStale)})
	files, err := readLive(dir, now)
	if err != nil || len(files) != 0 {
		t.Fatalf("readLive: %+v, %v; want nothing", files, err)
	}
	for _, p := range []string{deadPath, stalePath} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s not deleted: %v", p, err)
		}
	}
	// Garbage and a file claiming another PID are skipped, not fatal.
	os.WriteFile(filepath.Join(dir, strconv.Itoa(me)+".json"), []byte("{not json"), 0o600)
	os.WriteFile(filepath.Join(dir, "x.json"), []byte("{}"), 0o600)
	files, err = readLive(dir, now)
	if err != nil || len(files) != 0 {
		t.Fatalf("readLive over garbage: %+v, %v", files, err)
	}
	// Another network namespace's process: its devices are not ours.
	other := write(me, liveFile{SchemaVersion: 1, PID: me, Updated: now, Netns: "net:[1]"})
	files, err = readLive(dir, now)
	if err != nil || len(files) != 0 {
		t.Fatalf("readLive of another namespace's file: %+v, %v; want nothing", files, err)
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("a live process's file of another namespace was deleted: %v", err)
	}
	write(me, liveFile{SchemaVersion: 1, PID: me, Updated: now, Netns: netnsID(), Contexts: []liveContext{{Device: "tb_x", Counters: counterMap(verbs.Counters{PacketsIn: 7})}}})
	files, err = readLive(dir, now)
	if err != nil || len(files) != 1 || files[0].Contexts[0].Counters["packets_in"] != 7 {
		t.Fatalf("readLive: %+v, %v", files, err)
	}
	if files, err := readLive(filepath.Join(dir, "missing"), now); err != nil || files != nil {
		t.Errorf("missing directory: %v, %v; want no files, no error", files, err)
	}
}
