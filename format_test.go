package tbrdma_test

import (
	"bytes"
	"go/format"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestFormat fails if a Go file of the repository is not gofmt-formatted.
// It checks the files git knows about (tracked, or untracked and not
// ignored); outside a git checkout it walks the tree. testdata/, vendor/ and
// hidden directories are skipped.
func TestFormat(t *testing.T) {
	files := goFiles(t)
	if len(files) == 0 {
		t.Fatal("no Go files found")
	}
	for _, name := range files {
		src, err := os.ReadFile(name)
		if os.IsNotExist(err) {
			continue // deleted in the work tree but still in the index
		}
		if err != nil {
			t.Fatal(err)
		}
		out, err := format.Source(src)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if !bytes.Equal(src, out) {
			t.Errorf("%s is not gofmt-formatted; run gofmt -w %s", name, name)
		}
	}
}

func skipDir(rel string) bool {
	for _, part := range strings.Split(filepath.ToSlash(rel), "/") {
		if part == "testdata" || part == "vendor" || (len(part) > 1 && part[0] == '.') {
			return true
		}
	}
	return false
}

func goFiles(t *testing.T) []string {
	var files []string
	if git, err := exec.LookPath("git"); err == nil {
		out, err := exec.Command(git, "ls-files", "--cached", "--others", "--exclude-standard", "-z", "--", "*.go").Output()
		if err == nil {
			for _, name := range strings.Split(string(out), "\x00") {
				if name != "" && !skipDir(filepath.Dir(name)) {
					files = append(files, name)
				}
			}
			return files
		}
	}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != "." && skipDir(path) {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}
