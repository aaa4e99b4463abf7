package cli

import (
	"context"
	"encoding/json"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func TestVersion(t *testing.T) {
	bi := func() (*debug.BuildInfo, bool) {
		return &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/tbrdma/tbrdma", Version: "v0.3.1"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"}}}, true
	}
	f, out, _ := testFactory()
	if err := runVersion(&versionOptions{IO: f.IO, BuildInfo: bi}); err != nil {
		t.Fatal(err)
	}
	if want := "tbrdma v0.3.1 (0123456789ab+dirty)\ngo1.26.0 " + runtime.GOOS + "/" + runtime.GOARCH + "\n"; out.String() != want {
		t.Errorf("version:\n%q\nwant\n%q", out, want)
	}

	f, out, _ = testFactory()
	if err := runVersion(&versionOptions{IO: f.IO, BuildInfo: bi, JSON: true}); err != nil {
		t.Fatal(err)
	}
	var v versionJSON
	if err := json.Unmarshal(out.Bytes(), &v); err != nil {
		t.Fatal(err)
	}
	if v.SchemaVersion != 1 || v.Version != "v0.3.1" || v.Commit != "0123456789abcdef0123" || !v.Modified ||
		v.GoVersion != "go1.26.0" || v.OS != runtime.GOOS || v.Arch != runtime.GOARCH {
		t.Errorf("json %+v", v)
	}

	f, out, _ = testFactory()
	none := func() (*debug.BuildInfo, bool) { return nil, false }
	if err := runVersion(&versionOptions{IO: f.IO, BuildInfo: none}); err != nil {
		t.Fatal(err)
	}
	if want := "tbrdma (devel)\n" + runtime.Version(); !strings.HasPrefix(out.String(), want) {
		t.Errorf("no build info: %q", out)
	}
}

func TestVersionCompletionCommands(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		want string // in stdout, or stderr for usage errors
	}{
		{[]string{"version"}, ExitOK, "tbrdma "},
		{[]string{"version", "--json"}, ExitOK, `"schemaVersion":1`},
		{[]string{"--version"}, ExitOK, "tbrdma (devel)\ngo1."},
		{[]string{"version", "x"}, ExitUsage, "too many arguments"},
		{[]string{"completion", "bash"}, ExitOK, "# bash completion V2 for tbrdma"},
		{[]string{"completion", "zsh"}, ExitOK, "#compdef tbrdma"},
		{[]string{"completion", "fish"}, ExitOK, "complete -c tbrdma"},
		{[]string{"completion", "csh"}, ExitUsage, `unknown shell "csh": want bash, zsh or fish`},
		{[]string{"completion"}, ExitUsage, "completion needs one shell"},
		{[]string{"completion", "bash", "zsh"}, ExitUsage, "completion needs one shell"},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			f, out, errOut := testFactory()
			code := run(context.Background(), f, c.args)
			got := out.String()
			if c.code == ExitUsage {
				got = errOut.String()
				if !strings.Contains(got, "Usage:") {
					t.Errorf("no usage:\n%s", got)
				}
			}
			if code != c.code || !strings.Contains(got, c.want) {
				t.Errorf("exit %d (want %d), output lacks %q:\n%.300s\nstderr:\n%s", code, c.code, c.want, got, errOut)
			}
		})
	}
}

// TestCompletionComplete checks that the scripts' helper command answers:
// subcommands, then the shells of "completion".
func TestCompletionComplete(t *testing.T) {
	f, out, errOut := testFactory()
	if code := run(context.Background(), f, []string{"__complete", "pe"}); code != ExitOK || !strings.Contains(out.String(), "peers") {
		t.Fatalf("exit %d:\n%s\n%s", code, out, errOut)
	}
	f, out, _ = testFactory()
	if code := run(context.Background(), f, []string{"__complete", "completion", ""}); code != ExitOK ||
		!strings.Contains(out.String(), "bash\nzsh\nfish\n") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
}
