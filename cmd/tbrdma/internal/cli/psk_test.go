package cli

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoadPSK: the key file's content less a trailing newline; empty,
// short, missing and group- or world-accessible files are refused with
// usage errors that say what to do.
func TestLoadPSK(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	key, err := loadPSK(write("good", "0123456789abcdef0123\n", 0o600))
	if err != nil || string(key) != "0123456789abcdef0123" {
		t.Fatalf("good key: %q, %v", key, err)
	}
	if key, err := loadPSK(write("crlf", "0123456789abcdef\r\n", 0o400)); err != nil || string(key) != "0123456789abcdef" {
		t.Fatalf("key with CRLF: %q, %v", key, err)
	}
	if key, err := loadPSK(""); key != nil || err != nil {
		t.Fatalf("no file: %q, %v", key, err)
	}
	bad := map[string]struct {
		path string
		want string
	}{
		"empty":          {write("empty", "", 0o600), "at least 16"},
		"newline only":   {write("newline", "\n", 0o600), "at least 16"},
		"short":          {write("short", "fifteen bytes!!\n", 0o600), "at least 16"},
		"missing":        {filepath.Join(dir, "missing"), "chmod 600"},
		"directory":      {dir, "not a regular file"},
		"world-readable": {write("open", "0123456789abcdef0123", 0o644), "chmod 600"},
		"group-readable": {write("group", "0123456789abcdef0123", 0o640), "chmod 600"},
	}
	for name, tc := range bad {
		_, err := loadPSK(tc.path)
		var fe *FlagError
		if !errors.As(err, &fe) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s key file: %v, want a usage error saying %q", name, err, tc.want)
		}
	}
}

// TestPSKFlag: --psk-file with a short key fails before the command runs
// (exit 2, the error names the file); TBRDMA_PSK_FILE is read when the
// flag is absent; a good key lets the command run.
func TestPSKFlag(t *testing.T) {
	dir := t.TempDir()
	short, good := filepath.Join(dir, "short"), filepath.Join(dir, "good")
	if err := os.WriteFile(short, []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(good, []byte("0123456789abcdef0123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, _, errOut := testFactory()
	if code := run(t.Context(), f, []string{"--psk-file", short, "version"}); code != ExitUsage || !strings.Contains(errOut.String(), "--psk-file "+short) {
		t.Fatalf("exit %d, stderr %q", code, errOut.String())
	}
	t.Setenv(pskEnv, short)
	f, _, errOut = testFactory()
	if code := run(t.Context(), f, []string{"version"}); code != ExitUsage || !strings.Contains(errOut.String(), "at least 16") {
		t.Fatalf("from %s: exit %d, stderr %q", pskEnv, code, errOut.String())
	}
	t.Setenv(pskEnv, good)
	f, _, errOut = testFactory()
	if code := run(t.Context(), f, []string{"version"}); code != ExitOK || errOut.Len() != 0 {
		t.Fatalf("good key from %s: exit %d, stderr %q", pskEnv, code, errOut.String())
	}
}

// TestServePSKHostsNoTCPTests: with a key, serve hosts no pingpong or
// perftest clients on TCP (their exchange carries no key) unless
// --oob-port is given, and then it warns; without a key it hosts them.
func TestServePSKHostsNoTCPTests(t *testing.T) {
	for _, c := range []struct {
		name    string
		psk     bool
		args    []string
		oobPort int
		note    string
	}{
		{"no key", false, nil, 18515, ""},
		{"key", true, nil, 0, "--psk-file: not hosting pingpong and perftest clients on TCP (their exchange carries no key); give --oob-port 18515 to host them without it"},
		{"key and --oob-port", true, []string{"--oob-port", "18600"}, 18600, "warning: --psk-file covers rdma_cm connections only: the pingpong and perftest clients on TCP port 18600 are served without the key"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, _, errOut := testFactory()
			f.PSK = c.psk
			var opts *serveOptions
			cmd := newCmdServe(f, func(o *serveOptions) error { opts = o; return nil })
			cmd.SetArgs(c.args)
			if err := cmd.Execute(); err != nil {
				t.Fatal(err)
			}
			if opts.OOBPort != c.oobPort {
				t.Errorf("--oob-port %d, want %d", opts.OOBPort, c.oobPort)
			}
			if c.note == "" && errOut.Len() != 0 || !strings.Contains(errOut.String(), c.note) {
				t.Errorf("stderr %q, want %q", errOut.String(), c.note)
			}
		})
	}
}
