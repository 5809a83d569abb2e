// Package k8slabel checks Kubernetes label keys and values, and shortens
// values that do not fit, as the root package's selectors and package
// subnet's auto-pool labels need.
package k8slabel

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// Limits and messages of Kubernetes's validation of qualified names and label
// values (k8s.io/apimachinery/pkg/util/validation).
const (
	// MaxNameLen is the longest name part of a key, and the longest value.
	MaxNameLen   = 63
	maxPrefixLen = 253

	nameSyntax = "consist of alphanumeric characters, '-', '_' or '.', " +
		"and must start and end with an alphanumeric character"
)

// KeyProblem says what is wrong with a label key, which must be a
// qualified name: an optional DNS-1123 subdomain prefix and "/", then a name.
// It returns "" for a valid key and does not allocate.
func KeyProblem(key string) string {
	name := key
	if prefix, rest, ok := strings.Cut(key, "/"); ok {
		if strings.IndexByte(rest, '/') >= 0 {
			return "a qualified name must " + nameSyntax +
				", with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
		}
		switch {
		case prefix == "":
			return "prefix part must be non-empty"
		case len(prefix) > maxPrefixLen:
			return "prefix part must be no more than 253 characters"
		case !IsDNSSubdomain(prefix):
			return "prefix part must be a lowercase RFC 1123 subdomain: lower case alphanumeric " +
				"characters, '-' or '.', starting and ending with an alphanumeric character"
		}
		name = rest
	}
	switch {
	case name == "":
		return "name part must be non-empty"
	case len(name) > MaxNameLen:
		return "name part must be no more than 63 characters"
	case !isName(name):
		return "name part must " + nameSyntax
	}
	return ""
}

// ValueProblem says what is wrong with a label value, which may be empty.
// It returns "" for a valid value and does not allocate.
func ValueProblem(v string) string {
	switch {
	case v == "":
		return ""
	case len(v) > MaxNameLen:
		return "must be no more than 63 characters"
	case !isName(v):
		return "a valid label must be an empty string or " + nameSyntax
	}
	return ""
}

// isName reports whether s matches ([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9].
func isName(s string) bool {
	if s == "" || !isAlnum(s[0]) || !isAlnum(s[len(s)-1]) {
		return false
	}
	for i := 1; i < len(s)-1; i++ {
		if c := s[i]; !isAlnum(c) && c != '-' && c != '_' && c != '.' {
			return false
		}
	}
	return true
}

// IsDNSSubdomain reports whether s matches the DNS-1123 subdomain pattern
// [a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*, ignoring
// length.
func IsDNSSubdomain(s string) bool {
	for {
		part, rest, more := strings.Cut(s, ".")
		if part == "" || !isLowerAlnum(part[0]) || !isLowerAlnum(part[len(part)-1]) {
			return false
		}
		for i := 1; i < len(part)-1; i++ {
			if c := part[i]; !isLowerAlnum(c) && c != '-' {
				return false
			}
		}
		if !more {
			return true
		}
		s = rest
	}
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

func isLowerAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || '0' <= c && c <= '9'
}

// Value returns v if it fits in a label value (63 characters), else its
// first 57 characters, "-" and five hexadecimal digits of its SHA-256, which
// keeps distinct long values distinct. Spiderpool writes long values as they
// are, which the API server refuses.
func Value(v string) string {
	if len(v) <= MaxNameLen {
		return v
	}
	sum := sha256.Sum256([]byte(v))
	return v[:MaxNameLen-6] + "-" + hex.EncodeToString(sum[:])[:5]
}
