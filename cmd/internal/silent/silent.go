// Package silent is a test helper: a server that accepts connections and
// never answers, what a client meets when an API server or a member hangs.
package silent

import (
	"net"
	"sync"
	"testing"
)

// Server listens on 127.0.0.1, accepts every connection and never reads
// or writes it, until the test ends. It returns the listener's host:port.
func Server(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // held open, never read or written
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return l.Addr().String()
}
