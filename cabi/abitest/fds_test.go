//go:build tbrdma_abitest

package abitest

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// buildC compiles testdata/NAME.c with the system compiler against the
// installed rdma-core headers, as a user would (-libverbs and extra libs).
func buildC(t *testing.T, name string, libs ...string) string {
	t.Helper()
	need(t, "cc")
	out := filepath.Join(t.TempDir(), name)
	args := append([]string{"-O2", "-Wall", "-o", out, filepath.Join("testdata", name+".c")}, libs...)
	if b, err := exec.Command("cc", args...).CombinedOutput(); err != nil {
		t.Fatalf("cc %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	return out
}

// TestFileDescriptors: completion channel fds and async_fd are real file
// descriptors (poll, epoll, O_NONBLOCK → EAGAIN) and ibv_get_cq_event is a
// cancellation point (testdata/fds.c).
func TestFileDescriptors(t *testing.T) {
	bin := buildC(t, "fds", "-libverbs", "-lpthread")
	l := NewLink(t)
	progress("fds: completion channel and async fds")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r := Run(t, Command(ctx, t, l.NsA, bin))
	if r.Err != nil || !strings.Contains(r.Out, "0 failures") {
		t.Fatalf("fds: %v\n%s", r.Err, r.Out)
	}
	for _, c := range []string{"channel_nonblock_eagain", "channel_epoll_readable", "channel_event_cq", "async_nonblock_eagain", "get_cq_event_cancellable"} {
		if !strings.Contains(r.Out, "CHECK "+c+" ok") {
			t.Errorf("check %s did not pass:\n%s", c, r.Out)
		}
	}
}
