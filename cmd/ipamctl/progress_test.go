package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// fakeClock is a clock a test moves.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

func TestProgress(t *testing.T) {
	steps := []struct {
		after       time.Duration
		done, total int
	}{
		{0, 500, 150000},                        // within the first second: quiet
		{time.Second, 1000, 150000},             // shown
		{100 * time.Millisecond, 1500, 150000},  // too soon for either
		{150 * time.Millisecond, 12000, 150000}, // a terminal's turn
		{5 * time.Second, 140000, 0},            // both; total unknown
	}
	tests := []struct {
		name     string
		terminal bool
		quiet    bool
		want     string
	}{
		{"lines", false, false, "ipamctl: read 1,000 of ~150,000 pods\nipamctl: read 140,000 pods\n"},
		{"terminal", true, false, "\ripamctl: read 1,000 of ~150,000 pods\033[K\ripamctl: read 12,000 of ~150,000 pods\033[K\ripamctl: read 140,000 pods\033[K\n"},
		{"quiet", false, true, ""},
		{"quiet terminal", true, true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			c := &fakeClock{t: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)}
			p := newProgress(&b, c.now)
			p.terminal, p.quiet = tt.terminal, tt.quiet
			for _, s := range steps {
				c.advance(s.after)
				p.report(s.done, s.total, "pods")
			}
			p.end()
			p.end()
			if diff := cmp.Diff(tt.want, b.String()); diff != "" {
				t.Errorf("progress (-want +got):\n%s", diff)
			}
		})
	}
	var nilp *progress
	nilp.report(1, 2, "pods") // a command without progress
	nilp.end()
}

func TestThousands(t *testing.T) {
	for n, want := range map[int]string{0: "0", 7: "7", 999: "999", 1000: "1,000", 12000: "12,000", 150000: "150,000", 1234567: "1,234,567", -1234: "-1,234"} {
		if got := thousands(n); got != want {
			t.Errorf("thousands(%d) = %q, want %q", n, got, want)
		}
	}
}
