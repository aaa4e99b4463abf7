package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tbrdma/tbrdma/verbs"
)

// Live counters: every tbrdma process that holds a device context open
// (every command that opens one through the Factory: serve, the test
// commands, cat, ping, udaddy …) publishes the counters of its contexts in a
// file of its own,
//
//	$XDG_RUNTIME_DIR/tbrdma/<pid>.json     (else $TMPDIR/tbrdma-<uid>/<pid>.json)
//
// rewritten every livePeriod and when a context closes, mode 0600 in a
// directory of mode 0700, removed when the process's last context closes.
// "tbrdma devices -v" and --json read them all and sum the counters per
// device. A file whose process is gone (killed before it could remove it)
// is ignored and deleted by the next reader; so is one not rewritten for
// liveStale (its PID reused by another program). A reader counts only the
// files of processes in its own network namespace (Linux).

const (
	livePeriod = time.Second
	liveStale  = 30 * time.Second
	// liveMaxFile bounds what a reader reads of one file.
	liveMaxFile = 1 << 20
	// liveSchema is the files' schemaVersion.
	liveSchema = 1
)

// liveFile is one process's file.
type liveFile struct {
	SchemaVersion int    `json:"schemaVersion"`
	PID           int    `json:"pid"`
	Command       string `json:"command"` // the tbrdma subcommand
	// Netns names the process's network namespace on Linux
	// ("net:[4026531840]"); empty elsewhere. Devices of the same name in
	// two namespaces (the thunderbolt0 of each simulated machine) are not
	// the same device: a reader counts only files of its own namespace.
	Netns    string        `json:"netns,omitempty"`
	Updated  time.Time     `json:"updated"`
	Contexts []liveContext `json:"contexts"`
}

// liveContext is one open device context of a process.
type liveContext struct {
	Device   string            `json:"device"` // verbs device name; empty for a context opened on an address alone
	Addr     string            `json:"addr"`   // the context's local address
	Counters map[string]uint64 `json:"counters"`
}

// liveDir is the directory of the counter files.
func liveDir() string {
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "tbrdma")
	}
	return filepath.Join(os.TempDir(), "tbrdma-"+strconv.Itoa(os.Getuid()))
}

// ensureLiveDir makes dir (mode 0700) and checks that it is a directory
// of ours that nobody else can write to, not a symbolic link another user
// planted in a shared temporary directory.
func ensureLiveDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory: remove it", dir)
	}
	if err := ownedByUs(fi); err != nil {
		return fmt.Errorf("%s: %w", dir, err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return os.Chmod(dir, 0o700)
	}
	return nil
}

// livePublisher publishes the counters of this process's open contexts.
// There is one per process (live), shared by every Factory.
type livePublisher struct {
	mu      sync.Mutex
	ctxs    []*verbs.Context
	running bool
	kick    chan struct{}
	// dir and command are fixed when the first context is added.
	dir     string
	command string
	err     error // the last failure to write, reported once
}

var live = &livePublisher{}

// publishCounters adds c to the contexts this process publishes, until c
// is closed. command names the tbrdma subcommand.
func publishCounters(c *verbs.Context, command string) {
	live.add(c, command)
}

func (p *livePublisher) add(c *verbs.Context, command string) {
	p.mu.Lock()
	p.ctxs = append(p.ctxs, c)
	if !p.running {
		p.running = true
		p.kick = make(chan struct{}, 1)
		p.dir, p.command = liveDir(), command
		go p.loop(p.kick)
	}
	kick := p.kick
	p.mu.Unlock()
	p.write()
	go func() {
		<-c.Done()
		select {
		case kick <- struct{}{}:
		default:
		}
	}()
}

// loop rewrites the file every livePeriod and when a context closes; it
// ends, removing the file, when none is left open.
func (p *livePublisher) loop(kick chan struct{}) {
	t := time.NewTicker(livePeriod)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-kick:
		}
		if !p.write() {
			return
		}
	}
}

// flush writes the file now, or removes it when no context is open (run
// calls it as the command returns: a process about to exit must not leave
// its file behind for readers to clean).
func (p *livePublisher) flush() { p.write() }

// write drops the closed contexts and writes the file with the others, or
// removes it when none is left (and then reports false: the loop ends).
func (p *livePublisher) write() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.running {
		return false
	}
	p.ctxs = slices.DeleteFunc(p.ctxs, func(c *verbs.Context) bool {
		select {
		case <-c.Done():
			return true
		default:
			return false
		}
	})
	path := filepath.Join(p.dir, strconv.Itoa(os.Getpid())+".json")
	if len(p.ctxs) == 0 {
		os.Remove(path)
		p.running = false
		return false
	}
	f := liveFile{SchemaVersion: liveSchema, PID: os.Getpid(), Command: p.command, Netns: netnsID(), Updated: time.Now().UTC()}
	for _, c := range p.ctxs {
		lc := liveContext{Addr: c.LocalAddr().Addr().String(), Counters: counterMap(c.Counters())}
		if d := c.Device(); d != nil {
			lc.Device = d.Name
		}
		f.Contexts = append(f.Contexts, lc)
	}
	if err := writeLiveFile(p.dir, path, &f); err != nil && p.err == nil {
		// Publishing is a convenience for "tbrdma devices": never fatal.
		p.err = err
		fmt.Fprintf(os.Stderr, "tbrdma: warning: cannot publish counters for \"tbrdma devices\": %v\n", err)
	}
	return true
}

// writeLiveFile replaces path atomically (a reader never sees half a file).
func writeLiveFile(dir, path string, f *liveFile) error {
	if err := ensureLiveDir(dir); err != nil {
		return err
	}
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".tmp-*") // mode 0600
	if err != nil {
		return err
	}
	_, err = tmp.Write(b)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}

func counterMap(c verbs.Counters) map[string]uint64 {
	m := make(map[string]uint64)
	for _, f := range c.Fields() {
		m[f.Name] = f.Value
	}
	return m
}

// netnsID names this process's network namespace ("" where there are
// none, or /proc is not mounted).
func netnsID() string {
	id, _ := os.Readlink("/proc/self/ns/net")
	return id
}

// liveCommand is the subcommand this process runs, for the file.
func liveCommand() string {
	for _, a := range os.Args[1:] {
		if !strings.HasPrefix(a, "-") {
			return a
		}
	}
	return ""
}

// readLive reads the counter files in dir: those of live processes, most
// recently updated within liveStale of now. It deletes those of processes
// that are gone and stale ones. A missing directory is no process.
func readLive(dir string, now time.Time) ([]liveFile, error) {
	fi, err := os.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("%s is not a directory: remove it", dir)
	}
	if err := ownedByUs(fi); err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []liveFile
	for _, e := range ents {
		pidStr, ok := strings.CutSuffix(e.Name(), ".json")
		pid, err := strconv.Atoi(pidStr)
		if !ok || err != nil || pid <= 0 || !e.Type().IsRegular() {
			continue
		}
		path := filepath.Join(dir, e.Name())
		if !processAlive(pid) {
			os.Remove(path)
			continue
		}
		f, err := readLiveFile(path)
		if err != nil || f.PID != pid || f.SchemaVersion != liveSchema {
			continue
		}
		if now.Sub(f.Updated) > liveStale {
			os.Remove(path)
			continue
		}
		if f.Netns != netnsID() {
			continue // another namespace's devices
		}
		out = append(out, f)
	}
	slices.SortFunc(out, func(a, b liveFile) int { return a.PID - b.PID })
	return out, nil
}

func readLiveFile(path string) (liveFile, error) {
	var f liveFile
	fh, err := os.Open(path)
	if err != nil {
		return f, err
	}
	defer fh.Close()
	b, err := io.ReadAll(io.LimitReader(fh, liveMaxFile))
	if err != nil {
		return f, err
	}
	err = json.Unmarshal(b, &f)
	return f, err
}

// deviceLive is what the live files say about one device: the counters
// summed over the processes that have it open.
type deviceLive struct {
	Counters map[string]uint64
	Procs    []liveProc
}

type liveProc struct {
	PID     int
	Command string
}

// liveFor sums the contexts of files that are on d: by device name, or by
// address for a context opened without a device.
func liveFor(d *verbs.Device, files []liveFile) deviceLive {
	var dl deviceLive
	for _, f := range files {
		used := false
		for _, c := range f.Contexts {
			if !contextOn(d, c) {
				continue
			}
			used = true
			if dl.Counters == nil {
				dl.Counters = make(map[string]uint64)
			}
			for k, v := range c.Counters {
				dl.Counters[k] += v
			}
		}
		if used {
			dl.Procs = append(dl.Procs, liveProc{PID: f.PID, Command: f.Command})
		}
	}
	return dl
}

func contextOn(d *verbs.Device, c liveContext) bool {
	if c.Device != "" {
		return c.Device == d.Name
	}
	for _, g := range d.GIDs {
		if g.Addr.WithZone("").String() == c.Addr {
			return true
		}
	}
	return false
}
