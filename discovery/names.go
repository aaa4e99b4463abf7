package discovery

import (
	"fmt"
	"os"
	"strings"
)

// maxLabel is the longest DNS label (RFC 1035 §2.3.4, RFC 6763 §4.1.1).
const maxLabel = 63

// serviceName is the fully qualified service name.
var serviceName = ServiceType + "." + Domain

// escapeLabel turns one label (raw bytes) into presentation form.
func escapeLabel(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `.`, `\.`)
	return r.Replace(s)
}

// splitFirst returns the first label of a presentation-form name,
// unescaped, and the rest after its dot.
func splitFirst(name string) (label, rest string) {
	for i := 0; i < len(name); i++ {
		switch name[i] {
		case '\\':
			i++
		case '.':
			return unescapePresentation(name[:i]), name[i+1:]
		}
	}
	return unescapePresentation(name), ""
}

// instanceOf returns the instance label of an instance name under the
// tbrdma service, or ok false.
func instanceOf(name string) (string, bool) {
	label, rest := splitFirst(name)
	if label == "" || !strings.EqualFold(rest, serviceName) {
		return "", false
	}
	return label, true
}

// instanceFQDN returns the instance name of label in presentation form.
func instanceFQDN(label string) string {
	return escapeLabel(label) + "." + serviceName
}

// defaultHostLabel is the label of our host records: the OS host name
// (first label) plus "-tbrdma".
func defaultHostLabel() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		h = "tbrdma"
	}
	h, _, _ = strings.Cut(h, ".")
	return sanitizeHost(h) + "-tbrdma"
}

// sanitizeHost keeps a host label to letters, digits and hyphens.
func sanitizeHost(h string) string {
	var b strings.Builder
	for _, c := range h {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-':
			b.WriteRune(c)
		default:
			b.WriteByte('-')
		}
	}
	s := strings.Trim(b.String(), "-")
	if s == "" {
		s = "host"
	}
	if len(s) > maxLabel-len("-tbrdma-99") {
		s = s[:maxLabel-len("-tbrdma-99")]
	}
	return s
}

// defaultInstance is the default instance label: the OS host name.
func defaultInstance() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "tbrdma"
	}
	h, _, _ = strings.Cut(h, ".")
	return h
}

// renamed returns the n-th alternative of a name after a conflict
// (RFC 6762 §9: "name (2)" for instances, "host-2" for host names).
func renamed(base string, n int, host bool) string {
	if host {
		return fmt.Sprintf("%s-%d", base, n)
	}
	suffix := fmt.Sprintf(" (%d)", n)
	if len(base)+len(suffix) > maxLabel {
		base = base[:maxLabel-len(suffix)]
	}
	return base + suffix
}

// trimLocal turns "name", "name.local", "name.local." into "name".
func trimLocal(name string) string {
	name = strings.TrimSuffix(name, ".")
	if len(name) > len(".local") && strings.EqualFold(name[len(name)-len(".local"):], ".local") {
		name = name[:len(name)-len(".local")]
	}
	if len(name) > len("."+ServiceType) && strings.EqualFold(name[len(name)-len("."+ServiceType):], "."+ServiceType) {
		name = name[:len(name)-len("."+ServiceType)]
	}
	return name
}
