package etcdtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/storage/wal"
)

// This file runs members in child processes (Options.Processes): the
// parent's side, which starts, kills and asks them, and the child's, which
// is this package's init.

// memberEnv names the environment variable that makes a process a member
// of a cluster in process mode. It holds the member's settings as JSON.
const memberEnv = "ETCDTEST_MEMBER"

// readyLine is what a member in a child process prints on its standard
// output once it serves clients.
const readyLine = "etcdtest: ready"

const (
	// statusTimeout bounds each status request to a member in a child
	// process.
	statusTimeout = time.Second
	// closeTimeout is how long Close lets a member in a child process
	// close gracefully before it kills it.
	closeTimeout = 10 * time.Second
)

// walSegmentSize is the size of the WAL segments of a member in a child
// process.
const walSegmentSize = 1 << 20

func init() {
	if s, ok := os.LookupEnv(memberEnv); ok {
		os.Exit(runMember(s))
	}
}

// runMember runs the member that settings describes, in this process, until
// it is told to stop, and returns the process's exit status. It closes the
// member on SIGTERM or SIGINT and returns 0, or 2 if the member fails; it
// exits at once with status 3 when its standard input ends: the parent that
// holds the other end of it is gone.
func runMember(settings string) int {
	// Before anything else, so that a SIGTERM that comes early still
	// closes the member gracefully.
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, os.Interrupt)
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "etcdtest: "+format+"\n", args...)
		return 2
	}
	var s memberSettings
	if err := json.Unmarshal([]byte(settings), &s); err != nil {
		return fail("%s=%q: %v", memberEnv, settings, err)
	}
	go func() {
		io.Copy(io.Discard, os.Stdin)
		fmt.Fprintf(os.Stderr, "etcdtest: member %s: standard input closed (parent gone?); exiting\n", s.Name)
		os.Exit(3)
	}()
	// Small WAL segments, so that old ones are purged and a restart reads
	// little: it decodes every segment kept, which with etcd's 64 MB
	// grows for minutes under a busy test (and the race detector makes
	// decoding slow). The variable is the process's: only in a process
	// of the member's own.
	wal.SegmentSizeBytes = walSegmentSize
	e, err := startEmbed(s.config)
	if err != nil {
		return fail("member %s: start: %v", s.Name, err)
	}
	// Wait for the member to be ready, say so, then wait for the end: once
	// ready has fired it is nil, which select never receives from.
	ready := e.Server.ReadyNotify()
	for {
		select {
		case <-ready:
			fmt.Println(readyLine)
			ready = nil
		case err := <-e.Err():
			e.Close()
			return fail("member %s: %v", s.Name, err)
		case <-e.Server.StopNotify():
			e.Close()
			return fail("member %s: the server stopped by itself (ready: %t)", s.Name, ready == nil)
		case <-stop:
			e.Close()
			return 0
		}
	}
}

// process is a member's child process.
type process struct {
	cmd    *exec.Cmd
	stdin  io.Closer // the child exits when it is closed
	stderr *childOutput
	ready  chan struct{} // closed once the member serves clients
	done   chan struct{} // closed once the process has exited; err is set then
	err    error         // how it exited
	// stopping is set once Kill or Close has asked it to exit.
	stopping atomic.Bool
}

// exited reports whether the process has exited.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// startProcess starts m in a child process: this executable again, which
// runs the member from this package's init. It does not wait for the
// member to be ready.
func (m *Member) startProcess() (*process, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("member %s: finding this executable to run it again: %w", m.Name, err)
	}
	settings, err := json.Marshal(m.settings)
	if err != nil {
		return nil, fmt.Errorf("member %s: %w", m.Name, err)
	}
	cmd := exec.Command(exe)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, memberEnv+"=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, memberEnv+"="+string(settings))
	// The child exits when its standard input ends: when this process
	// exits, however it does. The pipe stays open until the child exits
	// (Wait closes it).
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("member %s: %w", m.Name, err)
	}
	p := &process{cmd: cmd, stdin: stdin, stderr: &childOutput{}, ready: make(chan struct{}), done: make(chan struct{})}
	cmd.Stdout = &readyWriter{ready: p.ready}
	cmd.Stderr = p.stderr
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("member %s: starting its process: %w", m.Name, err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
		select {
		case <-p.ready:
			// waitReady reports an exit before the member is ready.
			if !p.stopping.Load() {
				fmt.Fprintf(os.Stderr, "etcdtest: member %s (pid %d) exited by itself: %v; its standard error:\n%s\n",
					m.Name, cmd.Process.Pid, p.err, p.stderr)
			}
		default:
		}
	}()
	return p, nil
}

// waitProcessReady waits until p's member serves clients.
func (m *Member) waitProcessReady(p *process) error {
	timeout := time.NewTimer(startTimeout)
	defer timeout.Stop()
	select {
	case <-p.ready:
		return nil
	case <-p.done:
		return fmt.Errorf("member %s: process %d exited before the member was ready: %v; its standard error:\n%s",
			m.Name, p.cmd.Process.Pid, p.err, p.stderr)
	case <-timeout.C:
		return fmt.Errorf("member %s: process %d not ready after %s; its standard error:\n%s",
			m.Name, p.cmd.Process.Pid, startTimeout, p.stderr)
	}
}

// kill kills p with SIGKILL and waits until it has exited: its ports are
// free then.
func (p *process) kill() {
	p.stopping.Store(true)
	p.cmd.Process.Kill()
	<-p.done
}

// close asks p's member to close gracefully with SIGTERM and waits until
// the process has exited, killing it if it takes more than closeTimeout.
// It reports on os.Stderr a member that did not exit cleanly, as this is
// the only place that would notice (a data race found by the race
// detector, say, makes the exit status 66).
func (p *process) close(name string) {
	p.stopping.Store(true)
	if p.exited() {
		return // exited by itself, and reported then
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(closeTimeout)
	defer t.Stop()
	select {
	case <-p.done:
		if p.err != nil {
			fmt.Fprintf(os.Stderr, "etcdtest: member %s (pid %d) closing: %v; its standard error:\n%s\n",
				name, p.cmd.Process.Pid, p.err, p.stderr)
		}
	case <-t.C:
		p.cmd.Process.Kill()
		<-p.done
		fmt.Fprintf(os.Stderr, "etcdtest: member %s (pid %d) not closed after %s, killed; its standard error:\n%s\n",
			name, p.cmd.Process.Pid, closeTimeout, p.stderr)
	}
}

// processStatus asks m's process for its status: nil if m is stopped or
// does not answer in time.
func (m *Member) processStatus() *clientv3.StatusResponse {
	m.mu.Lock()
	p := m.p
	m.mu.Unlock()
	if p == nil || p.exited() {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), statusTimeout)
	defer cancel()
	st, err := m.status.Status(ctx, m.ClientURL())
	if err != nil || st.Header == nil {
		return nil
	}
	return st
}

// readyWriter is a child's standard output: it closes ready when the child
// prints readyLine.
type readyWriter struct {
	ready chan struct{}
	buf   []byte // the last bytes written, until readyLine
	seen  bool
}

func (w *readyWriter) Write(b []byte) (int, error) {
	if w.seen {
		return len(b), nil
	}
	w.buf = append(w.buf, b...)
	if bytes.Contains(w.buf, []byte(readyLine+"\n")) {
		w.seen = true
		w.buf = nil
		close(w.ready)
		return len(b), nil
	}
	if n := len(readyLine) + 1; len(w.buf) > n {
		w.buf = append(w.buf[:0], w.buf[len(w.buf)-n:]...)
	}
	return len(b), nil
}

// outputKeep is how much of the start and of the end of a child's standard
// error childOutput keeps.
const outputKeep = 4 << 10

// childOutput is a child's standard error: it keeps its start, where a
// panic's message is, and its end.
type childOutput struct {
	mu   sync.Mutex
	head []byte // the first outputKeep bytes
	tail []byte // the last outputKeep bytes after head
	cut  bool   // bytes were dropped between head and tail
}

func (o *childOutput) Write(b []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := len(b)
	if room := outputKeep - len(o.head); room > 0 {
		k := min(room, len(b))
		o.head = append(o.head, b[:k]...)
		b = b[k:]
	}
	o.tail = append(o.tail, b...)
	if len(o.tail) > 2*outputKeep {
		o.tail = append(o.tail[:0], o.tail[len(o.tail)-outputKeep:]...)
		o.cut = true
	}
	return n, nil
}

// String returns what the child wrote, or its start and its end.
func (o *childOutput) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	tail := o.tail
	cut := o.cut
	if len(tail) > outputKeep {
		tail = tail[len(tail)-outputKeep:]
		cut = true
	}
	switch {
	case len(o.head) == 0:
		return "(empty)"
	case cut:
		return fmt.Sprintf("%s\n[...]\n%s", o.head, tail)
	default:
		return string(o.head) + string(tail)
	}
}

// startEmbed starts an embedded member with newConfig's configuration.
// Binding the ports is tried again for a while: a port that a member just
// closed, or that another process took for a moment, can be busy.
func startEmbed(newConfig func() (*embed.Config, error)) (*embed.Etcd, error) {
	var err error
	for try := 0; try < 50; try++ {
		var cfg *embed.Config
		if cfg, err = newConfig(); err != nil {
			return nil, err
		}
		var e *embed.Etcd
		if e, err = embed.StartEtcd(cfg); err == nil {
			return e, nil
		}
		if !strings.Contains(err.Error(), "address already in use") {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil, err
}
