package cli

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

var update = flag.Bool("update", false, "rewrite docs/cli.md's generated command reference")

const (
	docPath    = "../../../../docs/cli.md"
	beginMark  = "<!-- BEGIN GENERATED: go test ./cmd/tbrdma/internal/cli -run TestCLIDocUpToDate -update -->"
	endMark    = "<!-- END GENERATED -->"
	docWrapCol = 100
)

// TestCLIDocUpToDate checks that docs/cli.md's command reference, between
// the markers, is what the command tree says; -update rewrites it.
func TestCLIDocUpToDate(t *testing.T) {
	b, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i, j := strings.Index(doc, beginMark), strings.Index(doc, endMark)
	if i < 0 || j < i {
		t.Fatalf("%s lacks the markers %q … %q", docPath, beginMark, endMark)
	}
	f, _, _ := testFactory()
	want := doc[:i+len(beginMark)] + "\n" + renderCommandDoc(newRootCmd(f)) + doc[j:]
	if want == doc {
		return
	}
	if *update {
		if err := os.WriteFile(docPath, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("docs/cli.md's command reference is out of date: run\n\tgo test ./cmd/tbrdma/internal/cli -run TestCLIDocUpToDate -update")
}

// renderCommandDoc renders the global flags, then each command's usage
// line, short description and flags, as cobra knows them.
func renderCommandDoc(root *cobra.Command) string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "\nGenerated from the command tree (`%s`). Every command also takes `-h`, `--help`.\n\n", root.UseLine())
	fmt.Fprintf(&b, "### Global flags\n\n```\n%s```\n", root.PersistentFlags().FlagUsagesWrapped(docWrapCol))
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			if sub.Hidden || sub.Name() == "help" {
				continue
			}
			fmt.Fprintf(&b, "\n### `%s`\n\n%s\n\n", sub.CommandPath(), sub.Short)
			fmt.Fprintf(&b, "```\n%s\n", sub.UseLine())
			if fs := localFlags(sub); fs.HasAvailableFlags() {
				fmt.Fprintf(&b, "\n%s", fs.FlagUsagesWrapped(docWrapCol))
			}
			fmt.Fprintf(&b, "```\n")
			walk(sub)
		}
	}
	walk(root)
	b.WriteString("\n")
	return b.String()
}

// localFlags are c's own flags, without the global ones and without help.
func localFlags(c *cobra.Command) *pflag.FlagSet {
	fs := pflag.NewFlagSet(c.Name(), pflag.ContinueOnError)
	c.LocalNonPersistentFlags().VisitAll(func(f *pflag.Flag) {
		if f.Name != "help" {
			fs.AddFlag(f)
		}
	})
	return fs
}
