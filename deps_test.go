package tbrdma_test

import (
	"bytes"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/tbrdma/tbrdma"

// depRule forbids the packages under dir (a module-relative path) from
// depending, directly or transitively, on any import path matched by
// forbidden, unless it is one of the import paths listed in allowed
// (exact paths, not patterns). See STYLE.md §4 and docs/architecture.md.
type depRule struct {
	dir       string
	forbidden []string
	allowed   []string
}

// Patterns: "pkg/..." matches pkg and everything below it; a pattern
// without "/..." is a substring of the import path (used for "mdns").
var depRules = []depRule{
	{dir: "transport", forbidden: []string{
		module + "/verbs/...", module + "/rdmacm/...", module + "/discovery/...", module + "/cmd/...",
		"github.com/spf13/cobra/...", "lipgloss", "github.com/hashicorp/...", "mdns",
	}},
	{dir: "verbs", forbidden: []string{
		module + "/discovery/...", module + "/rdmacm/...", module + "/cmd/...",
		"github.com/spf13/cobra/...", "lipgloss", "mdns",
	}},
	// discovery finds Thunderbolt interfaces through transport/netif, the
	// one place that detects them; nothing else of transport.
	{dir: "discovery", forbidden: []string{
		module + "/verbs/...", module + "/rdmacm/...", module + "/transport/...", module + "/cmd/...",
		"github.com/spf13/cobra/...", "lipgloss",
	}, allowed: []string{module + "/transport/netif"}},
	// internal/hooks is what verbs and transport offer the module's other
	// packages but not applications (docs/architecture.md, "Internal
	// hooks"). verbs imports it, so it may know transport and nothing
	// above it (the go tool refuses the cycle through verbs anyway).
	{dir: "internal/hooks", forbidden: []string{
		module + "/verbs/...", module + "/rdmacm/...", module + "/discovery/...", module + "/cmd/...",
		"github.com/spf13/cobra/...", "lipgloss", "mdns",
	}},
	// rdmacm uses the exported verbs API plus internal/hooks (QP1 and the
	// CM counters). No rule is needed for verbs/internal/...: the go tool
	// refuses that import from outside verbs, and verbs itself depends on
	// verbs/internal/mem, so a transitive rule would forbid importing
	// verbs at all.
	{dir: "rdmacm", forbidden: []string{
		module + "/cmd/...",
		"github.com/spf13/cobra/...", "lipgloss",
	}},
	// The test loops and exchanges under the CLI know nothing of its
	// commands, flags or terminal.
	{dir: "cmd/tbrdma/internal/perf", forbidden: []string{
		module + "/cmd/tbrdma/internal/cli", module + "/cmd/tbrdma/internal/ui",
		"github.com/spf13/cobra/...", "lipgloss",
	}},
	// stream is a library for programs of their own: verbs and rdmacm,
	// nothing of the CLI or of discovery.
	{dir: "stream", forbidden: []string{
		module + "/cmd/...", module + "/discovery/...",
		"github.com/spf13/cobra/...", "lipgloss", "mdns",
	}},
}

func matches(pattern, importPath string) bool {
	if prefix, ok := strings.CutSuffix(pattern, "/..."); ok {
		return importPath == prefix || strings.HasPrefix(importPath, prefix+"/")
	}
	return strings.Contains(importPath, pattern)
}

// violations returns "pkg -> dep" for every forbidden dependency in deps
// (package import path -> its transitive dependencies).
func violations(rules []depRule, deps map[string][]string) []string {
	var bad []string
	for _, r := range rules {
		for pkg, pkgDeps := range deps {
			if !matches(module+"/"+r.dir+"/...", pkg) {
				continue
			}
			for _, d := range pkgDeps {
				if slices.Contains(r.allowed, d) {
					continue
				}
				for _, f := range r.forbidden {
					if matches(f, d) {
						bad = append(bad, pkg+" -> "+d+" (forbidden: "+f+")")
					}
				}
			}
		}
	}
	return bad
}

// TestDependencies enforces the dependency direction of STYLE.md §4 with
// `go list -deps`. Library directories without packages yet are skipped.
func TestDependencies(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go tool not on PATH")
	}
	checked := 0
	for _, r := range depRules {
		// -e: report broken packages in .Error instead of failing; the build
		// and the package's own tests catch those.
		cmd := exec.Command(goTool, "list", "-e", "-deps", "-f",
			`{{if .Module}}{{if eq .Module.Path "`+module+`"}}{{.ImportPath}}{{range .Deps}} {{.}}{{end}}{{end}}{{end}}`,
			"./"+r.dir+"/...")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("%v: %v\n%s", cmd, err, stderr.String())
		}
		deps := make(map[string][]string)
		for line := range strings.Lines(stdout.String()) {
			f := strings.Fields(line)
			if len(f) > 0 {
				deps[f[0]] = f[1:]
			}
		}
		n := 0
		for pkg := range deps {
			if matches(module+"/"+r.dir+"/...", pkg) {
				n++
			}
		}
		if n == 0 {
			t.Logf("%s: no packages yet, skipped", r.dir)
			continue
		}
		checked += n
		for _, v := range violations([]depRule{r}, deps) {
			t.Errorf("forbidden dependency: %s", v)
		}
	}
	t.Logf("checked %d library packages", checked)
}

// TestDependencyRules checks that the rules catch what they should.
func TestDependencyRules(t *testing.T) {
	deps := map[string][]string{
		module + "/transport":            {"net/netip", "golang.org/x/sys/unix"},
		module + "/transport/sniff":      {module + "/verbs"},
		module + "/verbs":                {module + "/transport", module + "/transport/wire"},
		module + "/verbs/internal/mem":   {"github.com/hashicorp/mdns"},
		module + "/discovery":            {"github.com/hashicorp/mdns", module + "/transport/wire", module + "/transport/netif"},
		module + "/discovery/internal/x": {module + "/transport/netif/internal/y"}, // only netif itself is allowed
		module + "/rdmacm":               {module + "/verbs", module + "/verbs/internal/mem", module + "/discovery", module + "/cmd/tbrdma"},
		module + "/rdmacm/internal/fsm":  {"charm.land/lipgloss/v2"},
		module + "/cmd/tbrdma":           {"github.com/spf13/cobra", module + "/rdmacm"},
		module + "/verbsx":               {module + "/cmd/tbrdma"}, // not under verbs/
		module + "/transport/transport2": {module + "/verbsfoo"},   // not verbs/...
	}
	got := violations(depRules, deps)
	want := []string{
		module + "/transport/sniff -> " + module + "/verbs",
		module + "/verbs/internal/mem -> github.com/hashicorp/mdns",
		module + "/discovery -> " + module + "/transport/wire",
		module + "/discovery/internal/x -> " + module + "/transport/netif/internal/y",
		module + "/rdmacm -> " + module + "/cmd/tbrdma",
		module + "/rdmacm/internal/fsm -> charm.land/lipgloss/v2",
	}
	if len(got) != len(want) {
		t.Fatalf("got %d violations, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for _, w := range want {
		found := false
		for _, g := range got {
			found = found || strings.HasPrefix(g, w+" ")
		}
		if !found {
			t.Errorf("missing violation %q in:\n%s", w, strings.Join(got, "\n"))
		}
	}
}
