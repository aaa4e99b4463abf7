package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

const manDir = "../../../../docs/man"

// manDate matches the date field of a man page's .TH line, which
// TestManPagesUpToDate ignores (it is the day the pages were generated).
var manDate = regexp.MustCompile(`(?m)^(\.TH "[^"]*" "[^"]*" )"[^"]*"`)

// TestManPagesUpToDate checks that docs/man holds one man page per command,
// as the command tree says (cobra's generator); -update rewrites them.
func TestManPagesUpToDate(t *testing.T) {
	tmp := t.TempDir()
	f, _, _ := testFactory()
	root := newRootCmd(f)
	root.DisableAutoGenTag = true
	escapeForMan(root)
	now := time.Now()
	hdr := &doc.GenManHeader{Title: "TBRDMA", Section: "1", Source: "tbrdma", Manual: "tbrdma manual", Date: &now}
	if err := doc.GenManTree(root, hdr, tmp); err != nil {
		t.Fatal(err)
	}
	gen, _ := filepath.Glob(filepath.Join(tmp, "*.1"))
	have, _ := filepath.Glob(filepath.Join(manDir, "*.1"))
	names := func(paths []string) []string {
		var n []string
		for _, p := range paths {
			n = append(n, filepath.Base(p))
		}
		slices.Sort(n)
		return n
	}
	stale := !slices.Equal(names(gen), names(have))
	for _, p := range gen {
		want, _ := os.ReadFile(p)
		got, err := os.ReadFile(filepath.Join(manDir, filepath.Base(p)))
		if err != nil || manDate.ReplaceAllString(string(got), "$1") != manDate.ReplaceAllString(string(want), "$1") {
			stale = true
		}
	}
	if !stale {
		return
	}
	if !*update {
		t.Fatalf("docs/man is out of date (the pages %v; the command tree has %v): run\n\tgo test ./cmd/tbrdma/internal/cli -run TestManPagesUpToDate -update", names(have), names(gen))
	}
	for _, p := range have {
		os.Remove(p)
	}
	if err := os.MkdirAll(manDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range gen {
		b, _ := os.ReadFile(p)
		if err := os.WriteFile(filepath.Join(manDir, filepath.Base(p)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// escapeForMan escapes what the man generator's Markdown would read as
// HTML ("<peer>", "<seq-1>") in every command's text.
func escapeForMan(c *cobra.Command) {
	esc := strings.NewReplacer("<", `\<`, ">", `\>`)
	c.Use, c.Long, c.Example = esc.Replace(c.Use), esc.Replace(c.Long), esc.Replace(c.Example)
	for _, sub := range c.Commands() {
		escapeForMan(sub)
	}
}
