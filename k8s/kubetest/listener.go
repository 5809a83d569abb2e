package kubetest

import (
	"net"
	"sync"
)

// cutListener is a listener that can cut every connection it accepted, as a
// crashed server's connections are cut: the API server's graceful shutdown
// would otherwise wait for open watches to end (up to a minute).
type cutListener struct {
	net.Listener

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	cut   bool
}

func newCutListener(ln net.Listener) *cutListener {
	return &cutListener{Listener: ln, conns: map[net.Conn]struct{}{}}
}

func (l *cutListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		l.mu.Lock()
		if l.cut {
			l.mu.Unlock()
			c.Close()
			continue
		}
		tc := &trackedConn{Conn: c, l: l}
		l.conns[tc] = struct{}{}
		l.mu.Unlock()
		return tc, nil
	}
}

// cutAll closes every connection accepted so far, and every one accepted
// from now on.
func (l *cutListener) cutAll() {
	l.mu.Lock()
	l.cut = true
	conns := l.conns
	l.conns = map[net.Conn]struct{}{}
	l.mu.Unlock()
	for c := range conns {
		c.(*trackedConn).Conn.Close()
	}
}

type trackedConn struct {
	net.Conn
	l    *cutListener
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.conns, c)
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}
