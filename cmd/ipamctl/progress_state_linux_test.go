package main

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestProgressState reads a node's state directory of 2,100 claim files of
// 2,050 containers with a clock that moves 10s at each look, and checks the
// lines progress writes while the claim files are read and their owners
// indexed, and that --quiet writes none. Before, a state directory was read
// without a word, for seconds at tens of thousands of files.
func TestProgressState(t *testing.T) {
	data := t.TempDir()
	dir := filepath.Join(data, "big")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	const files, owners = 2100, 2050
	for i := range files {
		ip := netip.AddrFrom4([4]byte{10, 9, byte((i + 1) >> 8), byte(i + 1)}) // .0 is the network
		content := fmt.Sprintf("c%d\r\neth%d", i%owners, i/owners)
		if err := os.WriteFile(filepath.Join(dir, ip.String()), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	conf := filepath.Join(t.TempDir(), "big.conf")
	body := fmt.Sprintf(`{"cniVersion": "1.0.0", "name": "big", "type": "bridge",
		"ipam": {"type": "host-local", "dataDir": %q, "ranges": [[{"subnet": "10.9.0.0/16"}]]}}`, data)
	if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, quiet := range []bool{false, true} {
		c := &fakeClock{t: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)}
		clock := func() time.Time { c.advance(10 * time.Second); return c.now() }
		args := []string{"pools", "--cni-config", conf}
		if quiet {
			args = append(args, "--quiet")
		}
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), args, strings.NewReader(""), &stdout, &stderr, clock); code != exitOK {
			t.Fatalf("pools: status %d\n%s", code, stderr.String())
		}
		if !strings.Contains(stdout.String(), "2100") {
			t.Errorf("pools does not count the 2,100 claims:\n%s", stdout.String())
		}
		var lines []string
		for _, l := range strings.Split(stderr.String(), "\n") {
			if strings.HasPrefix(l, "ipamctl: read") {
				lines = append(lines, l)
			}
		}
		want := []string{
			"ipamctl: read 1,024 claim files", "ipamctl: read 2,048 claim files",
			"ipamctl: read 1,024 of ~2,050 owners into a temporary owner index",
			"ipamctl: read 2,048 of ~2,050 owners into a temporary owner index",
		}
		if quiet {
			want = nil
		}
		if diff := cmp.Diff(want, lines); diff != "" {
			t.Errorf("quiet %v: progress lines (-want +got):\n%s\nstderr:\n%s", quiet, diff, stderr.String())
		}
	}
}
