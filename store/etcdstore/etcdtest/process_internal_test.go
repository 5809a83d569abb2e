package etcdtest

import (
	"errors"
	"os/exec"
	"testing"
	"time"
)

// TestProcessParentGone checks that a member in a child process exits by
// itself when its standard input ends, as it does when the process that
// started it dies.
func TestProcessParentGone(t *testing.T) {
	c, err := Start(Options{Processes: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	m := c.Members[0]
	m.mu.Lock()
	p := m.p
	m.mu.Unlock()
	p.stopping.Store(true) // not an exit to report
	p.stdin.Close()
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("member %s: process %d still runs 10 s after its standard input closed", m.Name, p.cmd.Process.Pid)
	}
	if ee, ok := errors.AsType[*exec.ExitError](p.err); !ok || ee.ExitCode() != 3 {
		t.Errorf("member %s: process exited with %v, want exit status 3; its standard error:\n%s", m.Name, p.err, p.stderr)
	}
	if m.Running() {
		t.Errorf("member %s runs after its process exited", m.Name)
	}
}
