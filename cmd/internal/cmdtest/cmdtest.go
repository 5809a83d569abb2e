// Package cmdtest holds what the tests of this module's programs share: a
// server that never answers, a kubeconfig naming one, a file too large to
// read.
package cmdtest

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// SilentServer listens on 127.0.0.1, accepts every connection and never reads
// or writes it, until the test ends. It returns the listener's host:port.
func SilentServer(t testing.TB) string {
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

// Kubeconfig writes a kubeconfig whose current context is the server at
// addr (plain http) with a user of the given fields (YAML flow mapping
// entries, such as "tokenFile: /x"), and returns its path.
func Kubeconfig(t testing.TB, addr, user string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	data := fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "http://%s"}
users:
- name: u
  user: {%s}
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
`, addr, user)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// BigFile returns the path of a sparse file of size bytes, all zeros.
func BigFile(t testing.TB, size int64) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "big")
	f, err := os.Create(path)
	if err == nil {
		err = f.Truncate(size)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	return path
}
