package discovery

import (
	"errors"
	"fmt"
	"strings"
)

// TXT records (RFC 6763 §6): one "key=value" pair per character-string of
// at most 255 bytes; keys are printable US-ASCII (0x20-0x7E) except "=",
// at least one character, compared case-insensitively; the value, after
// the first "=", is opaque bytes; a key without "=" is a boolean attribute;
// a client uses only the first occurrence of a key. A record with no pairs
// is one empty string.

// maxTXTString is the length limit of one TXT character-string.
const maxTXTString = 255

var (
	errTXTTooLong = errors.New("txt string longer than 255 bytes")
	errTXTKey     = errors.New("invalid txt key")
)

type txtPair struct{ key, value string }

// encodeTXT returns the wire strings (raw bytes, not escaped) of pairs.
func encodeTXT(pairs []txtPair) ([]string, error) {
	if len(pairs) == 0 {
		return []string{""}, nil
	}
	out := make([]string, 0, len(pairs))
	for _, p := range pairs {
		if !validKey(p.key) {
			return nil, fmt.Errorf("%w %q", errTXTKey, p.key)
		}
		// An empty value goes as the key alone (a boolean attribute):
		// parseTXT reads both forms as "", and a 255-byte key has no
		// room for the "=" (FuzzTXT found it).
		s := p.key
		if p.value != "" {
			s += "=" + p.value
		}
		if len(s) > maxTXTString {
			return nil, fmt.Errorf("%w: key %q", errTXTTooLong, p.key)
		}
		out = append(out, s)
	}
	return out, nil
}

func validKey(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		if c := k[i]; c < 0x20 || c > 0x7e || c == '=' {
			return false
		}
	}
	return true
}

// parseTXT decodes wire strings (raw bytes) into a map with lowercased
// keys. Strings that are not valid pairs (empty key, non-printable key,
// over-long) are skipped and reported in bad; the rest still count.
func parseTXT(strs []string) (m map[string]string, bad []string) {
	m = make(map[string]string)
	for _, s := range strs {
		if s == "" {
			continue // the empty record, or padding
		}
		if len(s) > maxTXTString {
			bad = append(bad, s[:16]+"…")
			continue
		}
		key, value, _ := strings.Cut(s, "=")
		if !validKey(key) {
			bad = append(bad, s)
			continue
		}
		key = strings.ToLower(key)
		if _, dup := m[key]; dup {
			continue
		}
		m[key] = value
	}
	return m, bad
}

// escapeTXT converts raw bytes to the presentation form miekg/dns packs,
// where "\" starts an escape.
func escapeTXT(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	return strings.ReplaceAll(s, `\`, `\\`)
}

// unescapePresentation undoes miekg/dns's presentation escapes (\DDD and
// \X) in a TXT string or a domain-name label.
func unescapePresentation(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' || i+1 == len(s) {
			b = append(b, c)
			continue
		}
		i++
		if i+2 < len(s) && isDigit(s[i]) && isDigit(s[i+1]) && isDigit(s[i+2]) {
			v := int(s[i]-'0')*100 + int(s[i+1]-'0')*10 + int(s[i+2]-'0')
			b = append(b, byte(v))
			i += 2
			continue
		}
		b = append(b, s[i])
	}
	return string(b)
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
