package cli

import (
	"context"
	"regexp"
	"strings"
	"testing"
)

func TestDemoQuick(t *testing.T) {
	f, out, errOut := testFactory()
	a, b := loopbackAddr(), loopbackAddr()
	code := run(context.Background(), f, []string{"demo", "--quick", "--addr-a", a.String(), "--addr-b", b.String()})
	if code != ExitOK {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	s := out.String()
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^819200 bytes in \d+\.\d\d seconds = [\d.]+ Mbit/sec$`),
		regexp.MustCompile(`(?m)^ 65536      500 `),
		regexp.MustCompile(`(?m)^ 64      100 `),
		regexp.MustCompile(`(?m)^ 8       100 `),
		regexp.MustCompile(`All 4 steps passed`),
	} {
		if !want.MatchString(s) {
			t.Errorf("output lacks %v:\n%s", want, s)
		}
	}
	if strings.Contains(s, "\x1b") {
		t.Errorf("styled output in a pipe: %q", s)
	}
	if strings.Contains(s, "invalid data") {
		t.Errorf("data check failed:\n%s", s)
	}
}

func TestDemoRejectsBadAddresses(t *testing.T) {
	f, _, _ := testFactory()
	if code := run(context.Background(), f, []string{"demo", "--addr-a", "10.0.0.1"}); code != ExitUsage {
		t.Fatalf("non-loopback address: exit %d, want %d", code, ExitUsage)
	}
	if code := run(context.Background(), f, []string{"demo", "--addr-a", "127.0.0.9", "--addr-b", "127.0.0.9"}); code != ExitUsage {
		t.Fatalf("same address twice: exit %d, want %d", code, ExitUsage)
	}
}
