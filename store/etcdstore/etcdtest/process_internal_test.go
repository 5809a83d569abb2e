package etcdtest

import (
	"encoding/json"
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

// TestFsyncSetting checks that Options.Fsync reaches the member's etcd
// configuration, in this process and, as JSON, in a child process: members
// sync to disk with it and skip the sync without it.
func TestFsyncSetting(t *testing.T) {
	for _, fsync := range []bool{false, true} {
		c, err := Start(Options{Fsync: fsync})
		if err != nil {
			t.Fatal(err)
		}
		s := c.Members[0].settings
		c.Close()
		data, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		var child memberSettings
		if err := json.Unmarshal(data, &child); err != nil {
			t.Fatal(err)
		}
		cfg, err := child.config()
		if err != nil {
			t.Fatal(err)
		}
		if cfg.UnsafeNoFsync == fsync {
			t.Errorf("Options{Fsync: %t}: the member's UnsafeNoFsync is %t", fsync, cfg.UnsafeNoFsync)
		}
	}
}
