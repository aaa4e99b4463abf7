// Package docsection rewrites the generated parts of the project's
// Markdown documents. A test that measures something (docs/reliability.md's
// tables, for one) writes its output between a pair of marker comments,
// and nothing else in the file changes, so several generators and hand-
// written prose share one document.
package docsection

import (
	"bytes"
	"fmt"
	"os"
	"slices"
)

// Markers returns the comment pair that delimits the section called name:
// "<!-- BEGIN name -->" and "<!-- END name -->".
func Markers(name string) (begin, end string) {
	return "<!-- BEGIN " + name + " -->", "<!-- END " + name + " -->"
}

// Replace replaces what lies between the markers begin and end in the file
// at path with a newline and content. Both markers must be there, begin
// first; the error then says which to add.
func Replace(path, begin, end, content string) error {
	doc, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	i, j := bytes.Index(doc, []byte(begin)), bytes.Index(doc, []byte(end))
	if i < 0 || j < i {
		return fmt.Errorf("%s lacks the markers %q and %q (in that order): add them where the generated text goes", path, begin, end)
	}
	out := slices.Concat(doc[:i+len(begin)], []byte("\n"), []byte(content), doc[j:])
	return os.WriteFile(path, out, 0o644)
}

// ReplaceNamed is Replace with Markers(name).
func ReplaceNamed(path, name, content string) error {
	begin, end := Markers(name)
	return Replace(path, begin, end, content)
}
