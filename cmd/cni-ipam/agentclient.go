package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/ipamkit/ipam/cmd/internal/limited"
)

// The thin exec: when the network config's ipam.kubernetes section names
// the socket of a node agent ("agent": "/run/ipamkit/agent.sock"), the
// plugin forwards ADD, DEL, CHECK, GC and STATUS to the agent, a
// long-lived "cni-ipam agent" on the node (agent.go), and prints its
// answer. This file is in every build: forwarding needs no Kubernetes
// client, so a plugin built without -tags kubernetes can forward too, and
// one built with it reads no kubeconfig and makes no request of the API
// server.
//
// The protocol: one request per connection on a unix socket; the plugin
// writes an agentRequest as JSON and closes its side for writing, the
// agent answers with an agentReply as JSON and closes the connection.

// defaultAgentSocket is the socket "cni-ipam agent" listens on unless told
// otherwise (--socket), and the one deploy/ configures.
const defaultAgentSocket = "/run/ipamkit/agent.sock"

// agentRequest is one CNI call forwarded to the agent: the command, the
// CNI environment as skel read it, and stdin.
type agentRequest struct {
	// Command is ADD, DEL, CHECK, GC or STATUS; READY asks whether the
	// agent is ready (a readiness probe), with no Args.
	Command string        `json:"command"`
	Args    *skel.CmdArgs `json:"args,omitempty"`
}

// agentReply is the agent's answer: what the plugin would have printed on
// stdout and stderr, and its error, which the plugin prints as skel does
// (exit status 1).
type agentReply struct {
	Stdout []byte       `json:"stdout,omitempty"`
	Stderr []byte       `json:"stderr,omitempty"`
	Error  *types.Error `json:"error,omitempty"`
}

// maxAgentMessage bounds a request or a reply on the socket: stdin (up to
// maxStdin) in base64, and the envelope.
const maxAgentMessage = maxStdin*4/3 + 1<<20

// agentSlack is how much longer than a call's deadline the plugin waits
// for the agent's answer: the agent enforces the deadline itself.
const agentSlack = 10 * time.Second

// agentSocket returns the socket that the ipam.kubernetes.agent field of
// the network config names, or "" if the field is absent or empty (or the
// config does not parse: the call reports that itself). It reads nothing
// else of the config.
func agentSocket(stdin []byte) (string, error) {
	var conf struct {
		IPAM struct {
			Kubernetes struct {
				Agent json.RawMessage `json:"agent"`
			} `json:"kubernetes"`
		} `json:"ipam"`
	}
	if json.Unmarshal(stdin, &conf) != nil {
		return "", nil
	}
	raw := conf.IPAM.Kubernetes.Agent
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var sock string
	if err := json.Unmarshal(raw, &sock); err != nil {
		return "", &codedError{types.ErrDecodingFailure, fmt.Errorf("ipam.kubernetes.agent: %s: want the path of the agent's socket", abbrev(raw))}
	}
	if sock != "" && !filepath.IsAbs(sock) {
		return "", &codedError{types.ErrInvalidNetworkConfig,
			fmt.Errorf("ipam.kubernetes.agent %q: want an absolute path, such as %q", sock, defaultAgentSocket)}
	}
	return sock, nil
}

// via returns the command cmd: forwarded to the agent the config names,
// or local when it names none or this process is the agent.
func (p *plugin) via(cmd string, local func(*skel.CmdArgs) error) func(*skel.CmdArgs) error {
	return func(args *skel.CmdArgs) error {
		if p.kube != nil {
			return local(args) // the agent itself
		}
		sock, err := agentSocket(args.StdinData)
		switch {
		case err != nil:
			return toCNI(nil, err)
		case sock == "":
			return local(args)
		}
		return p.forward(sock, cmd, args)
	}
}

// forward sends the call to the agent at sock, prints what it printed and
// returns its error. An agent that cannot be reached, or that closes the
// connection without an answer, is code 11, try again later (50 for
// STATUS, plugin not available), at once.
func (p *plugin) forward(sock, cmd string, args *skel.CmdArgs) error {
	reply, err := askAgent(sock, agentRequest{Command: cmd, Args: args}, p.timeout+agentSlack)
	if err != nil {
		code := uint(types.ErrTryAgainLater)
		msg := "try again later: "
		if cmd == "STATUS" {
			code, msg = types.ErrPluginNotAvailable, ""
		}
		return types.NewError(code, msg+err.Error(), "")
	}
	p.warn.Write(reply.Stderr)
	if _, err := p.stdout.Write(reply.Stdout); err != nil {
		return types.NewError(types.ErrIOFailure, fmt.Sprintf("writing the result: %v", err), "")
	}
	if reply.Error != nil {
		return reply.Error
	}
	return nil
}

// askAgent sends req to the agent at sock and returns its reply, waiting
// at most timeout.
func askAgent(sock string, req agentRequest, timeout time.Duration) (agentReply, error) {
	var reply agentReply
	fail := func(err error) (agentReply, error) {
		return agentReply{}, fmt.Errorf("cni-ipam agent at %s: %w", sock, err)
	}
	body, err := json.Marshal(req)
	if err != nil {
		return fail(err)
	}
	conn, err := net.DialTimeout("unix", sock, timeout)
	if err != nil {
		return fail(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(timeout))
	if _, err := conn.Write(body); err != nil {
		return fail(err)
	}
	if err := conn.(*net.UnixConn).CloseWrite(); err != nil {
		return fail(err)
	}
	data, err := limited.Read(conn, maxAgentMessage)
	switch {
	case err != nil:
		return fail(err)
	case len(bytes.TrimSpace(data)) == 0:
		return fail(errors.New("closed the connection without an answer"))
	}
	if err := json.Unmarshal(data, &reply); err != nil {
		return fail(fmt.Errorf("answer: %w", err))
	}
	return reply, nil
}

// readAgentRequest reads one request from conn, up to maxAgentMessage.
func readAgentRequest(r io.Reader) (agentRequest, error) {
	var req agentRequest
	data, err := limited.Read(r, maxAgentMessage)
	if err != nil {
		return req, err
	}
	if err := json.Unmarshal(data, &req); err != nil {
		return req, fmt.Errorf("request: %w", err)
	}
	return req, nil
}
