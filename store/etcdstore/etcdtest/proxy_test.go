package etcdtest_test

import (
	"io"
	"net"
	"sync"
	"testing"
)

// proxy forwards TCP connections to a target address until cut: then it
// closes every connection it forwards and refuses new ones until restored.
// It stands between a client and a member to break the client's stream
// without stopping the member.
type proxy struct {
	l      net.Listener
	target string

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
}

// newProxy starts a proxy to target on 127.0.0.1, stopped when t ends.
func newProxy(t testing.TB, target string) *proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{l: l, target: target, conns: map[net.Conn]struct{}{}}
	go p.serve()
	t.Cleanup(func() {
		l.Close()
		p.Cut()
	})
	return p
}

// Addr returns the proxy's address, host:port.
func (p *proxy) Addr() string { return p.l.Addr().String() }

func (p *proxy) serve() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		go p.forward(c)
	}
}

func (p *proxy) forward(c net.Conn) {
	if !p.track(c) {
		c.Close()
		return
	}
	u, err := net.Dial("tcp", p.target)
	if err != nil || !p.track(u) {
		c.Close()
		if u != nil {
			u.Close()
		}
		return
	}
	go func() {
		io.Copy(u, c)
		u.Close()
	}()
	io.Copy(c, u)
	c.Close()
}

// track adds c to the connections Cut closes, and reports false if the
// proxy is cut.
func (p *proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

// Cut closes every forwarded connection and refuses new ones.
func (p *proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

// Restore forwards connections again.
func (p *proxy) Restore() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}
