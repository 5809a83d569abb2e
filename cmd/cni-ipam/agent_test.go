//go:build kubernetes

package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/stretchr/testify/require"

	"github.com/ipamkit/ipam/cmd/internal/cmdtest"
)

// The agent's parts that need no API server; the agent serving calls is
// tested in k8s/kubetest.

func TestAgentFlags(t *testing.T) {
	t.Setenv("NODE_NAME", "")
	var stderr bytes.Buffer
	o, err := parseAgentFlags([]string{"--node", "n1"}, &stderr)
	require.NoError(t, err)
	require.Equal(t, defaultAgentSocket, o.socket)
	require.True(t, o.spread)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--node", ""}, "--node: empty"},
		{[]string{"--node", "n1", "--socket", "agent.sock"}, `--socket "agent.sock": want an absolute path`},
		{[]string{"--node", "n1", "--kube-api-qps", "0"}, "--kube-api-qps 0: must be positive"},
		{[]string{"--node", "n1", "--kube-api-burst", "-1"}, "--kube-api-burst -1: must be positive"},
		{[]string{"--node", "n1", "--log-level", "loud"}, `--log-level "loud"`},
		{[]string{"--node", "n1", "extra"}, `unexpected argument "extra"`},
	} {
		_, err := parseAgentFlags(c.args, &stderr)
		require.ErrorContainsf(t, err, c.want, "%q", c.args)
	}
}

// TestAgentSocket: the socket is mode 0600; a socket left by an agent gone
// is replaced, one another agent serves is not, nor a file that is not a
// socket; closing removes it.
func TestAgentSocket(t *testing.T) {
	dir := shortDir(t)
	path := filepath.Join(dir, "run", "agent.sock")
	ln, err := listenAgent(path)
	require.NoError(t, err)
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	_, err = listenAgent(path)
	require.ErrorContains(t, err, "another agent is serving it")
	ln.SetUnlinkOnClose(false) // as if killed
	require.NoError(t, ln.Close())
	ln, err = listenAgent(path)
	require.NoError(t, err, "a socket left behind")
	require.NoError(t, ln.Close())
	_, err = os.Lstat(path)
	require.ErrorIs(t, err, os.ErrNotExist, "closing removes the socket")

	file := filepath.Join(dir, "file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	_, err = listenAgent(file)
	require.ErrorContains(t, err, "exists and is not a socket")
	_, err = net.Dial("unix", path)
	require.Error(t, err)
}

// TestKeyLocks: calls of one container ID run one at a time, of others at
// once; no lock is left behind.
func TestKeyLocks(t *testing.T) {
	t.Parallel()
	var k keyLocks
	var inA, maxA atomic.Int32
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			defer k.lock("a")()
			n := inA.Add(1)
			if n > maxA.Load() {
				maxA.Store(n)
			}
			time.Sleep(time.Millisecond)
			inA.Add(-1)
		})
	}
	unlockB := k.lock("b")
	done := make(chan struct{})
	go func() { defer k.lock("c")(); close(done) }()
	<-done // not held up by b
	unlockB()
	wg.Wait()
	require.Equal(t, int32(1), maxA.Load(), "two calls of one container ID at once")
	require.Empty(t, k.held)
}

// TestAgentNotReady: an agent whose caches cannot sync (its API server
// accepts and never answers) answers ADD, DEL and CHECK at once with 11,
// STATUS and its probe with 50; cancelled, it stops and removes its socket.
func TestAgentNotReady(t *testing.T) {
	t.Parallel()
	socket := filepath.Join(shortDir(t), "agent.sock")
	o, err := parseAgentFlags([]string{"--node", "n1", "--socket", socket,
		"--kubeconfig", cmdtest.Kubeconfig(t, cmdtest.SilentServer(t), "")}, io.Discard)
	require.NoError(t, err)
	cfg, err := agentRestConfig(o)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- serveAgent(ctx, cfg, o, slog.New(slog.DiscardHandler)) }()
	require.Eventually(t, func() bool { _, err := os.Stat(socket); return err == nil }, time.Minute, 10*time.Millisecond)

	var out, warn bytes.Buffer
	p := &plugin{open: openState, stdout: &out, warn: &warn, timeout: time.Minute}
	args := &skel.CmdArgs{ContainerID: "c1", IfName: "eth0", Args: "K8S_POD_NAMESPACE=default;K8S_POD_NAME=p", StdinData: agentNet(socket)}
	f := p.funcs()
	for name, cmd := range map[string]func(*skel.CmdArgs) error{"ADD": f.Add, "DEL": f.Del, "CHECK": f.Check} {
		te := cniCode(t, cmd(args))
		require.Equalf(t, uint(types.ErrTryAgainLater), te.Code, "%s: %+v", name, te)
		require.Containsf(t, te.Msg, "not ready", "%s", name)
	}
	te := cniCode(t, f.Status(args))
	require.Equal(t, uint(types.ErrPluginNotAvailable), te.Code, "%+v", te)
	reply, err := askAgent(socket, agentRequest{Command: "READY"}, time.Minute)
	require.NoError(t, err)
	require.NotNil(t, reply.Error)
	require.Equal(t, uint(types.ErrPluginNotAvailable), reply.Error.Code)

	cancel()
	require.NoError(t, <-done)
	_, err = os.Lstat(socket)
	require.ErrorIs(t, err, os.ErrNotExist, "the socket after the agent stopped")
}
