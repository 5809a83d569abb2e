package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ipamkit/ipam/cmd/internal/cmdtest"
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

// TestProgressLive reads a cluster whose pods come in three pages, with a
// clock that moves 10s at each look, and checks the lines progress
// writes, and that --quiet writes none.
func TestProgressLive(t *testing.T) {
	const pods = 1200
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path != "/api/v1/pods" {
			fmt.Fprint(w, `{"kind": "List", "apiVersion": "v1", "metadata": {}, "items": []}`)
			return
		}
		from, _ := strconv.Atoi(r.URL.Query().Get("continue"))
		to := min(from+livePage, pods)
		meta := "{}"
		if to < pods {
			meta = fmt.Sprintf(`{"continue": "%d", "remainingItemCount": %d}`, to, pods-to)
		}
		items := make([]string, 0, to-from)
		for i := from; i < to; i++ {
			items = append(items, fmt.Sprintf(`{"metadata": {"name": "p-%d", "namespace": "default", "uid": "u-%d"}}`, i, i))
		}
		fmt.Fprintf(w, `{"kind": "PodList", "apiVersion": "v1", "metadata": %s, "items": [%s]}`, meta, strings.Join(items, ","))
	}))
	defer srv.Close()
	kubeconfig := cmdtest.Kubeconfig(t, strings.TrimPrefix(srv.URL, "http://"), "")
	for _, quiet := range []bool{false, true} {
		c := &fakeClock{t: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)}
		clock := func() time.Time { c.advance(10 * time.Second); return c.now() }
		args := []string{"explain", "--kubeconfig", kubeconfig}
		if quiet {
			args = append(args, "--quiet")
		}
		var stdout, stderr bytes.Buffer
		run(context.Background(), args, strings.NewReader(""), &stdout, &stderr, clock)
		var lines []string
		for _, l := range strings.Split(stderr.String(), "\n") {
			if strings.HasPrefix(l, "ipamctl: read") {
				lines = append(lines, l)
			}
		}
		want := []string{
			"ipamctl: read 0 spiderippools", "ipamctl: read 0 spiderreservedips", "ipamctl: read 0 namespaces", "ipamctl: read 0 nodes",
			"ipamctl: read 500 of ~1,200 pods", "ipamctl: read 1,000 of ~1,200 pods", "ipamctl: read 1,200 of ~1,200 pods",
			"ipamctl: read 0 statefulsets",
		}
		if quiet {
			want = nil
		}
		if diff := cmp.Diff(want, lines); diff != "" {
			t.Errorf("quiet %v: progress lines (-want +got):\n%s\nstderr:\n%s", quiet, diff, stderr.String())
		}
	}
}
