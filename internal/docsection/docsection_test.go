package docsection

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReplaceNamed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "doc.md")
	orig := "# Title\n\nprose\n<!-- BEGIN A -->\nold table\n<!-- END A -->\nmore prose\n<!-- BEGIN B -->\nb\n<!-- END B -->\n"
	if err := os.WriteFile(path, []byte(orig), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := ReplaceNamed(path, "A", "| new |\n"); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	want := strings.Replace(orig, "old table\n", "| new |\n", 1)
	if string(got) != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	// Missing or swapped markers: an error, and the file unchanged.
	for _, name := range []string{"C"} {
		if err := ReplaceNamed(path, name, "x"); err == nil || !strings.Contains(err.Error(), "<!-- BEGIN C -->") {
			t.Errorf("missing markers: %v", err)
		}
	}
	if err := Replace(path, "<!-- END B -->", "<!-- BEGIN B -->", "x"); err == nil {
		t.Error("markers in the wrong order: no error")
	}
	if again, _ := os.ReadFile(path); string(again) != want {
		t.Error("a failed Replace changed the file")
	}
}
