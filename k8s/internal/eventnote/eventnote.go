// Package eventnote shapes the notes of the Kubernetes Events the k8s
// module's runners record.
package eventnote

import (
	"fmt"
	"unicode/utf8"
)

// Max is the longest note the API server accepts on an events.k8s.io/v1
// Event, in bytes.
const Max = 1024

// Sprintf formats a note and cuts it to Max bytes (at a rune boundary,
// ending in "..."), so that a long error, such as every problem of an
// invalid pool joined, still makes an Event the API server accepts.
func Sprintf(format string, args ...any) string {
	s := fmt.Sprintf(format, args...)
	if len(s) <= Max {
		return s
	}
	cut := Max - len("...")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}
