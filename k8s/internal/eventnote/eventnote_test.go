package eventnote

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestSprintf(t *testing.T) {
	if got := Sprintf("pool %q: %s", "a", "bad"); got != `pool "a": bad` {
		t.Errorf("short: %q", got)
	}
	for _, s := range []string{strings.Repeat("x", 5000), strings.Repeat("é", 3000), strings.Repeat("x", Max)} {
		got := Sprintf("%s", s)
		if len(got) > Max || !utf8.ValidString(got) {
			t.Errorf("len %d, valid %v", len(got), utf8.ValidString(got))
		}
		if len(s) > Max && !strings.HasSuffix(got, "...") {
			t.Errorf("cut note without ...: %q", got[len(got)-10:])
		}
		if len(s) <= Max && got != s {
			t.Errorf("note of %d bytes changed", len(s))
		}
	}
}
