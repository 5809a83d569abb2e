package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestProgName(t *testing.T) {
	for argv0, want := range map[string]string{
		"ipamctl":                      "ipamctl",
		"/usr/local/bin/ipamctl":       "ipamctl",
		"kubectl-ipam":                 "kubectl ipam",
		"/home/me/go/bin/kubectl-ipam": "kubectl ipam",
		"kubectl-ipamctl":              "ipamctl",
	} {
		if got := progName(argv0); got != want {
			t.Errorf("progName(%q) = %q, want %q", argv0, got, want)
		}
	}
}

// TestRenamer pins that only a name at the start of a line is renamed:
// messages name the program there, and what they quote is left alone.
func TestRenamer(t *testing.T) {
	var b bytes.Buffer
	r := &renamer{w: &b, to: "kubectl ipam"}
	for _, s := range []string{
		"ipamctl explain: --pod x: no such pod\n",
		"ipamctl: note: 2 objects skipped\n  ipamctl is quoted here\n",
		"ipamctl", ": a name alone in a write\n",
		"\ripamctl: read 500 of ~900 pods", "\ripamctl: read 900 of ~900 pods\n",
		"see ipamctl -h\n",
	} {
		if n, err := r.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
	}
	want := "kubectl ipam explain: --pod x: no such pod\n" +
		"kubectl ipam: note: 2 objects skipped\n  ipamctl is quoted here\n" +
		"kubectl ipam: a name alone in a write\n" +
		"\rkubectl ipam: read 500 of ~900 pods\rkubectl ipam: read 900 of ~900 pods\n" +
		"see ipamctl -h\n"
	if b.String() != want {
		t.Fatalf("renamed:\n%q\nwant\n%q", b.String(), want)
	}
}

// TestUsageListsCommands pins that the usage names every command run
// accepts (pools and who were once missing), and no other.
func TestUsageListsCommands(t *testing.T) {
	var listed []string
	for _, line := range strings.Split(usage, "\n") {
		if f := strings.Fields(line); len(f) > 1 && strings.HasPrefix(line, "  ") && !strings.HasPrefix(line, "   ") {
			listed = append(listed, f[0])
		}
	}
	want := []string{"explain", "validate", "gc", "plan", "pools", "who", "kube", "version"}
	if strings.Join(listed, " ") != strings.Join(want, " ") {
		t.Errorf("usage lists %q, want %q", listed, want)
	}
	for _, c := range want {
		if _, errOut, code := runCmd(t, c, "-h"); code != exitOK {
			t.Errorf("%s -h: exit %d: %s", c, code, errOut)
		}
	}
	if _, _, code := runCmd(t, "nosuch", "-h"); code != exitUsage {
		t.Errorf("nosuch -h: exit %d, want %d", code, exitUsage)
	}
}

// TestKubectlPlugin builds ipamctl as kubectl-ipam, the name kubectl runs
// for "kubectl ipam", and checks that it introduces itself so.
func TestKubectlPlugin(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the program")
	}
	bin := filepath.Join(t.TempDir(), pluginName)
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	help, err := exec.Command(bin, "help").Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(help), "usage: kubectl ipam <command> [flags]\n") ||
		!strings.Contains(string(help), `Run "kubectl ipam <command> -h"`) || strings.Contains(string(help), "ipamctl") {
		t.Errorf("kubectl-ipam help:\n%s", help)
	}
	cmd := exec.Command(bin, "explain", "-f", filepath.Join(t.TempDir(), "missing.yaml"))
	cmd.Env = append(os.Environ(), "KUBECONFIG=")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err == nil || !strings.HasPrefix(stderr.String(), "kubectl ipam") || strings.Contains(stderr.String(), "ipamctl") {
		t.Errorf("kubectl-ipam explain of a missing file: %v, stderr:\n%s", err, stderr.String())
	}
	// The same program under its own name.
	var out, errOut bytes.Buffer
	if code := runProg(context.Background(), "ipamctl", []string{"bogus"}, nil, &out, &errOut, fixedClock); code != exitUsage ||
		!strings.HasPrefix(errOut.String(), `ipamctl: unknown command "bogus"`) {
		t.Errorf("ipamctl bogus: exit %d, stderr:\n%s", code, errOut.String())
	}
}
