package etcdtest_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/ipamkit/ipam/store/etcdstore/etcdtest"
)

// TestProcesses kills the leader of a cluster whose members run in
// processes of their own, checks that the other two still take writes,
// then restarts it and checks that it rejoins: it runs, a leader is agreed
// on, and it serves the write it missed.
func TestProcesses(t *testing.T) {
	c := trio(t)
	l, err := c.WaitLeader(leaderWait)
	if err != nil {
		t.Fatal(err)
	}
	l.Kill()
	if l.Running() {
		t.Fatalf("member %s runs after Kill", l.Name)
	}
	if l.IsLeader() {
		t.Fatalf("member %s leads after Kill", l.Name)
	}
	// Its process has exited: its client port is free.
	host := strings.TrimPrefix(l.ClientURL(), "http://")
	if ln, err := net.Listen("tcp", host); err != nil {
		t.Errorf("member %s's client port after Kill: %v", l.Name, err)
	} else {
		ln.Close()
	}

	var others []string
	for _, m := range c.Members {
		if m != l {
			others = append(others, m.ClientURL())
		}
	}
	cli := rawClient(t, others)
	key := newPrefix(t) + "k"
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		_, err := cli.Put(ctx, key, "v")
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("writing through %v with %s killed: %v", others, l.Name, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	nl, err := c.WaitLeader(leaderWait)
	if err != nil {
		t.Fatalf("with %s killed: %v", l.Name, err)
	}
	if nl == l {
		t.Fatalf("killed member %s is still the leader", l.Name)
	}

	if err := l.Restart(); err != nil {
		t.Fatal(err)
	}
	if !l.Running() {
		t.Fatalf("member %s does not run after Restart", l.Name)
	}
	if _, err := c.WaitLeader(leaderWait); err != nil {
		t.Fatalf("after restarting %s: %v", l.Name, err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	resp, err := rawClient(t, []string{l.ClientURL()}).Get(ctx, key)
	if err != nil {
		t.Fatalf("reading through restarted %s: %v", l.Name, err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
		t.Fatalf("reading %s through restarted %s: %v, want v", key, l.Name, resp.Kvs)
	}
}

// TestProcessesTLS checks that Start refuses Processes with TLS, naming
// both.
func TestProcessesTLS(t *testing.T) {
	c, err := etcdtest.Start(etcdtest.Options{Processes: true, TLS: &etcdtest.TLS{CertFile: "c", KeyFile: "k"}})
	if err == nil {
		c.Close()
		t.Fatal("Start with Processes and TLS: no error")
	}
	if !strings.Contains(err.Error(), "Processes") || !strings.Contains(err.Error(), "TLS") {
		t.Errorf("Start with Processes and TLS: %v, want an error naming both", err)
	}
}
