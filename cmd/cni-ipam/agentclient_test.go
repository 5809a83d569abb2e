package main

import (
	"bytes"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/stretchr/testify/require"
)

// The plugin's side of the node agent (agentclient.go), in the default
// build, which has no Kubernetes client: the agent itself runs against a
// real API server in k8s/kubetest (TestAgent and the tests after it).

// agentNet is a network config whose ipam.kubernetes section names the
// agent at socket, and a kubeconfig that does not exist: a plugin that
// forwards never reads it.
func agentNet(socket string) []byte {
	b, _ := json.Marshal(map[string]any{"cniVersion": "1.1.0", "name": "kube", "type": "macvlan",
		"ipam": map[string]any{"type": "cni-ipam", "kubernetes": map[string]any{"agent": socket, "kubeconfig": "/nonexistent"}}})
	return b
}

// shortDir returns a directory whose paths fit a unix socket's 108 bytes.
func shortDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "ag")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func TestAgentSocketField(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		ipam string
		want string
		code uint
	}{
		{`{"ranges": [[{"subnet": "10.1.0.0/24"}]]}`, "", 0},
		{`{"kubernetes": {}}`, "", 0},
		{`{"kubernetes": {"agent": null}}`, "", 0},
		{`{"kubernetes": {"agent": ""}}`, "", 0},
		{`{"kubernetes": {"agent": "/run/ipamkit/agent.sock"}}`, "/run/ipamkit/agent.sock", 0},
		{`{"kubernetes": {"agent": "agent.sock"}}`, "", types.ErrInvalidNetworkConfig},
		{`{"kubernetes": {"agent": 5}}`, "", types.ErrDecodingFailure},
		{`{"kubernetes": "x"}`, "", 0}, // the call reports it, as without an agent
	} {
		got, err := agentSocket([]byte(`{"name": "n", "ipam": ` + c.ipam + `}`))
		if c.code != 0 {
			te := toCNI(nil, err)
			require.Equalf(t, c.code, te.Code, "%s: %+v", c.ipam, te)
			require.Containsf(t, te.Msg, "ipam.kubernetes.agent", "%s", c.ipam)
			continue
		}
		require.NoErrorf(t, err, "%s", c.ipam)
		require.Equalf(t, c.want, got, "%s", c.ipam)
	}
}

// TestAgentDown: with no agent on the socket the config names (no file, or
// a socket file nobody listens on), ADD, DEL, CHECK and GC fail with code
// 11 naming the socket, and STATUS with 50, without reading the
// kubeconfig the section names (it does not exist).
func TestAgentDown(t *testing.T) {
	t.Parallel()
	socket := filepath.Join(shortDir(t), "agent.sock")
	var out, warn bytes.Buffer
	p := &plugin{open: openState, stdout: &out, warn: &warn, timeout: time.Minute}
	args := &skel.CmdArgs{ContainerID: "c1", IfName: "eth0", Args: "K8S_POD_NAMESPACE=default;K8S_POD_NAME=p", StdinData: agentNet(socket)}
	f := p.funcs()
	check := func(what string) {
		for name, cmd := range map[string]func(*skel.CmdArgs) error{"ADD": f.Add, "DEL": f.Del, "CHECK": f.Check, "GC": f.GC} {
			te := cniCode(t, cmd(args))
			require.Equalf(t, uint(types.ErrTryAgainLater), te.Code, "%s %s: %+v", name, what, te)
			require.Containsf(t, te.Msg, socket, "%s %s", name, what)
		}
		te := cniCode(t, f.Status(args))
		require.Equalf(t, uint(types.ErrPluginNotAvailable), te.Code, "STATUS %s: %+v", what, te)
	}
	check("without a socket")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: socket, Net: "unix"})
	require.NoError(t, err)
	ln.SetUnlinkOnClose(false)
	require.NoError(t, ln.Close())
	check("with a socket nobody listens on")
	require.Zero(t, out.Len(), "nothing printed on stdout")
}

// TestAgentForward: the call reaches the agent with the CNI environment
// and stdin as skel read them, and the plugin prints what the agent
// answers (stdout, stderr, the error); an agent that closes the
// connection without an answer is 11.
func TestAgentForward(t *testing.T) {
	t.Parallel()
	socket := filepath.Join(shortDir(t), "agent.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: socket, Net: "unix"})
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	got := make(chan agentRequest, 1)
	replies := make(chan *agentReply, 3)
	go func() {
		for {
			conn, err := ln.AcceptUnix()
			if err != nil {
				return
			}
			req, err := readAgentRequest(conn)
			if err == nil {
				got <- req
				if r := <-replies; r != nil {
					json.NewEncoder(conn).Encode(r)
				}
			}
			conn.Close()
		}
	}()
	var out, warn bytes.Buffer
	p := &plugin{open: openState, stdout: &out, warn: &warn, timeout: time.Minute}
	args := &skel.CmdArgs{ContainerID: "c1", Netns: "/var/run/netns/x", IfName: "eth0", Args: "K8S_POD_NAMESPACE=default;K8S_POD_NAME=p",
		Path: "/opt/cni/bin", StdinData: agentNet(socket)}

	replies <- &agentReply{Stdout: []byte(`{"cniVersion": "1.1.0"}`), Stderr: []byte("a note\n")}
	require.NoError(t, p.funcs().Add(args))
	req := <-got
	require.Equal(t, "ADD", req.Command)
	require.Equal(t, args, req.Args)
	require.Equal(t, `{"cniVersion": "1.1.0"}`, out.String())
	require.Equal(t, "a note\n", warn.String())

	replies <- &agentReply{Error: types.NewError(types.ErrInvalidNetworkConfig, "no such pool", "details")}
	te := cniCode(t, p.funcs().Del(args))
	require.Equal(t, "DEL", (<-got).Command)
	require.Equal(t, types.NewError(types.ErrInvalidNetworkConfig, "no such pool", "details"), te)

	replies <- nil // closes without an answer
	te = cniCode(t, p.funcs().Check(args))
	<-got
	require.Equal(t, uint(types.ErrTryAgainLater), te.Code, "%+v", te)
	require.Contains(t, te.Msg, "without an answer")
}
