package ipamtest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"sync"
	"time"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/gc"
	"github.com/ipamkit/ipam/store"
)

// This file lets agents of a Sim run in other processes: RemoteAgent is
// the Sim's end, ServeAgent the other process's. They speak one JSON
// object a line: a request (open, pools, allocate, release, lookup, gc,
// close), then its reply. A remote agent opens its own Store instance
// with the function given to ServeAgent, so agents in several processes
// share a backend (a host-local directory, an etcd cluster) as the CNI
// plugins and node agents of a cluster do.
//
// A Request crosses the wire as JSON: NetConf's DisableIPv4, DisableIPv6 and
// ClusterNetwork, which the simulator never sets, do not.

// RemoteAgent is a Sim's end of an agent served by another process, which
// runs ServeAgent on its standard input and output. Give it to a Sim in
// SimOptions.Remote; one RemoteAgent serves one Sim at a time, and may
// serve several Sims one after the other (each opens it afresh).
//
// A RemoteAgent is safe for concurrent use, one call at a time. Its zero
// value is not usable: call StartRemoteAgent.
type RemoteAgent struct {
	mu       sync.Mutex
	cmd      *exec.Cmd
	in       io.WriteCloser
	out      *bufio.Reader
	deadline func(time.Time) error // sets the pipes' deadline
	broken   error                 // set once the stream is out of step
	// touched receives the keys the remote Store wrote; set by the Sim.
	touched *[]claimKey
}

// StartRemoteAgent starts cmd, whose process must run ServeAgent on its
// standard input and output, and returns the agent it serves. cmd's Stdin
// and Stdout must be unset; its Stderr is the caller's choice.
func StartRemoteAgent(cmd *exec.Cmd) (*RemoteAgent, error) {
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("ipamtest: remote agent: %w", err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("ipamtest: remote agent: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("ipamtest: remote agent: starting %s: %w", cmd.Path, err)
	}
	r := &RemoteAgent{cmd: cmd, in: in, out: bufio.NewReader(out)}
	if f, ok := out.(*os.File); ok {
		r.deadline = f.SetReadDeadline
	}
	return r, nil
}

// Close asks the process to end, and waits for it.
func (r *RemoteAgent) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.broken == nil {
		json.NewEncoder(r.in).Encode(wireRequest{Op: "close"})
	}
	r.in.Close()
	err := r.cmd.Wait()
	r.broken = errors.New("closed")
	if err != nil {
		return fmt.Errorf("ipamtest: remote agent %d: %w", r.pid(), err)
	}
	return nil
}

func (r *RemoteAgent) pid() int {
	if r.cmd.Process == nil {
		return 0
	}
	return r.cmd.Process.Pid
}

// call sends req and reads its reply, within ctx: a reply that does not come
// before ctx ends leaves the agent unusable.
func (r *RemoteAgent) call(ctx context.Context, req wireRequest) (wireReply, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fail := func(err error) (wireReply, error) {
		r.broken = err
		return wireReply{}, fmt.Errorf("%w %d: %s: %w", errRemote, r.pid(), req.Op, err)
	}
	if r.broken != nil {
		return wireReply{}, fmt.Errorf("%w %d: %s: unusable after an earlier failure: %w", errRemote, r.pid(), req.Op, r.broken)
	}
	if r.deadline != nil {
		stop := context.AfterFunc(ctx, func() { r.deadline(time.Now()) })
		defer stop()
	}
	b, err := json.Marshal(req)
	if err != nil {
		return wireReply{}, fmt.Errorf("%w: %s: %w", errRemote, req.Op, err)
	}
	if _, err := r.in.Write(append(b, '\n')); err != nil {
		return fail(err)
	}
	line, err := r.out.ReadBytes('\n')
	if err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return fail(err)
	}
	var rep wireReply
	if err := json.Unmarshal(line, &rep); err != nil {
		return fail(fmt.Errorf("reply %q: %w", bytes.TrimSpace(line), err))
	}
	if r.touched != nil {
		for _, k := range rep.Touched {
			*r.touched = append(*r.touched, claimKey{k.Pool, k.IP})
		}
	}
	return rep, rep.Err.err()
}

func (r *RemoteAgent) open(ctx context.Context, backend string, pools []*ipam.Pool, quarantine time.Duration) error {
	_, err := r.call(ctx, wireRequest{Op: "open", Backend: backend, Pools: pools, Quarantine: quarantine})
	return err
}

func (r *RemoteAgent) setPools(ctx context.Context, pools []*ipam.Pool) error {
	_, err := r.call(ctx, wireRequest{Op: "pools", Pools: pools})
	return err
}

func (r *RemoteAgent) allocate(ctx context.Context, req ipam.Request, now time.Time) (ipam.Result, error) {
	rep, err := r.call(ctx, wireRequest{Op: "allocate", Request: &req, Now: now})
	if err != nil || rep.Result == nil {
		return ipam.Result{}, err
	}
	return *rep.Result, nil
}

func (r *RemoteAgent) release(ctx context.Context, owner store.Owner, now time.Time) error {
	_, err := r.call(ctx, wireRequest{Op: "release", Owner: &owner, Now: now})
	return err
}

func (r *RemoteAgent) lookup(ctx context.Context, owner store.Owner) ([]store.Claim, error) {
	rep, err := r.call(ctx, wireRequest{Op: "lookup", Owner: &owner})
	return rep.Claims, err
}

func (r *RemoteAgent) collect(ctx context.Context, c gcCall) ([]gc.Decision, error) {
	rep, err := r.call(ctx, wireRequest{Op: "gc", GC: &c})
	ds := make([]gc.Decision, len(rep.Decisions))
	for i, d := range rep.Decisions {
		ds[i] = gc.Decision{Claim: d.Claim, Release: d.Release, Reason: d.Reason, Message: d.Message, Applied: d.Applied, Err: d.Err.err()}
	}
	return ds, err
}

// errRemote is what a RemoteAgent returns when the process serving it
// cannot be reached or answers nonsense.
var errRemote = errors.New("ipamtest: remote agent")

// ServeAgent serves the agent of a RemoteAgent: it reads requests from in,
// one JSON object a line, and writes each reply to out, until in ends or
// the RemoteAgent closes. Each time the Sim opens the agent (at its start,
// and when it replaces the agent by a fresh one), ServeAgent opens a new
// Store instance with open, from the backend the Sim names
// (SimOptions.Backend), closing the previous one if it is an io.Closer, and
// starts a new Allocator on it, which knows nothing but what the Store
// holds.
//
// A test binary serves as its own remote agent: its TestMain, finding an
// environment variable set by the test that starts it, calls ServeAgent on
// os.Stdin and os.Stdout instead of running the tests.
func ServeAgent(in io.Reader, out io.Writer, open func(backend string) (store.Store, error)) error {
	sv := &server{open: open, src: &swapSource{}}
	defer sv.closeStore()
	dec := json.NewDecoder(in)
	w := bufio.NewWriter(out)
	ctx := context.Background()
	for {
		var req wireRequest
		if err := dec.Decode(&req); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("ipamtest: serve agent: %w", err)
		}
		if req.Op == "close" {
			return nil
		}
		sv.touched = sv.touched[:0]
		rep := sv.serve(ctx, req)
		for _, k := range sv.touched {
			rep.Touched = append(rep.Touched, wireKey{k.pool, k.ip})
		}
		b, err := json.Marshal(rep)
		if err != nil {
			b, _ = json.Marshal(wireReply{Err: wireErr(err)})
		}
		w.Write(append(b, '\n'))
		if err := w.Flush(); err != nil {
			return fmt.Errorf("ipamtest: serve agent: %w", err)
		}
	}
}

// server is ServeAgent's state.
type server struct {
	open    func(string) (store.Store, error)
	st      store.Store
	alloc   *ipam.Allocator
	src     *swapSource
	pools   map[string]poolDoc // the pools as last sent, by name
	touched []claimKey
}

// poolDoc is a pool and the JSON it came from: a pool sent again unchanged
// keeps its pointer, so that the Allocator keeps its index.
type poolDoc struct {
	doc  string
	pool *ipam.Pool
}

func (sv *server) serve(ctx context.Context, req wireRequest) wireReply {
	if req.Op != "open" && req.Op != "pools" && sv.alloc == nil {
		return wireReply{Err: wireErr(fmt.Errorf("%s before open", req.Op))}
	}
	switch req.Op {
	case "open":
		if err := sv.closeStore(); err != nil {
			return wireReply{Err: wireErr(err)}
		}
		st, err := sv.open(req.Backend)
		if err != nil {
			return wireReply{Err: wireErr(fmt.Errorf("opening backend %q: %w", req.Backend, err))}
		}
		sv.st = st
		sv.setPools(req.Pools)
		tracked := newTrackStore(st, &sv.touched, nil, false)
		if sv.alloc, err = ipam.NewAllocator(ipam.Options{Pools: sv.src, Store: tracked, Quarantine: req.Quarantine}); err != nil {
			return wireReply{Err: wireErr(err)}
		}
	case "pools":
		sv.setPools(req.Pools)
	case "allocate":
		if req.Request == nil {
			return wireReply{Err: wireErr(errors.New("allocate without a request"))}
		}
		res, err := sv.alloc.AllocateAt(ctx, *req.Request, req.Now)
		if err != nil {
			return wireReply{Err: wireErr(err)}
		}
		return wireReply{Result: &res}
	case "release":
		if req.Owner == nil {
			return wireReply{Err: wireErr(errors.New("release without an owner"))}
		}
		return wireReply{Err: wireErr(sv.alloc.ReleaseAt(ctx, *req.Owner, req.Now))}
	case "lookup":
		if req.Owner == nil {
			return wireReply{Err: wireErr(errors.New("lookup without an owner"))}
		}
		cs, err := sv.alloc.Lookup(ctx, *req.Owner)
		return wireReply{Claims: cs, Err: wireErr(err)}
	case "gc":
		if req.GC == nil {
			return wireReply{Err: wireErr(errors.New("gc without its snapshot"))}
		}
		ds, err := req.GC.collectWith(ctx, sv.alloc)
		rep := wireReply{Err: wireErr(err), Decisions: make([]wireDecision, len(ds))}
		for i, d := range ds {
			rep.Decisions[i] = wireDecision{Claim: d.Claim, Release: d.Release, Reason: d.Reason, Message: d.Message, Applied: d.Applied, Err: wireErr(d.Err)}
		}
		return rep
	default:
		return wireReply{Err: wireErr(fmt.Errorf("unknown operation %q", req.Op))}
	}
	return wireReply{}
}

// setPools puts pools in force, keeping the pointers of those unchanged.
func (sv *server) setPools(pools []*ipam.Pool) {
	next := make(map[string]poolDoc, len(pools))
	list := make([]*ipam.Pool, 0, len(pools))
	for _, p := range pools {
		b, _ := json.Marshal(p)
		d := poolDoc{string(b), p}
		if old, ok := sv.pools[p.Name]; ok && old.doc == d.doc {
			d = old
		}
		next[p.Name] = d
		list = append(list, d.pool)
	}
	sv.pools = next
	sv.src.set(newPoolList(list))
}

func (sv *server) closeStore() error {
	c, ok := sv.st.(io.Closer)
	sv.st, sv.alloc = nil, nil
	if ok {
		return c.Close()
	}
	return nil
}

// wireRequest is one request of the protocol.
type wireRequest struct {
	Op         string        `json:"op"`
	Backend    string        `json:"backend,omitempty"`
	Pools      []*ipam.Pool  `json:"pools,omitempty"`
	Quarantine time.Duration `json:"quarantine,omitempty"`
	Request    *ipam.Request `json:"request,omitempty"`
	Owner      *store.Owner  `json:"owner,omitempty"`
	Now        time.Time     `json:"now,omitzero"`
	GC         *gcCall       `json:"gc,omitempty"`
}

// wireReply is the reply to one request.
type wireReply struct {
	Err       *wireError     `json:"err,omitempty"`
	Result    *ipam.Result   `json:"result,omitempty"`
	Claims    []store.Claim  `json:"claims,omitempty"`
	Decisions []wireDecision `json:"decisions,omitempty"`
	// Touched are the keys the agent's Store wrote, for the Sim's checks.
	Touched []wireKey `json:"touched,omitempty"`
}

type wireKey struct {
	Pool string     `json:"pool"`
	IP   netip.Addr `json:"ip"`
}

type wireDecision struct {
	Claim   store.Claim `json:"claim"`
	Release bool        `json:"release,omitempty"`
	Reason  gc.Reason   `json:"reason,omitempty"`
	Message string      `json:"message,omitempty"`
	Applied bool        `json:"applied,omitempty"`
	Err     *wireError  `json:"err,omitempty"`
}

// wireError is an error on the wire: its text, the sentinels it wraps, and
// the pool an *ipam.OverlapError refused.
type wireError struct {
	Msg     string   `json:"msg"`
	Is      []string `json:"is,omitempty"`
	Overlap string   `json:"overlap,omitempty"`
}

// sentinels are the errors a remote error keeps for errors.Is.
var sentinels = []struct {
	name string
	err  error
}{
	{"exhausted", ipam.ErrExhausted}, {"no-candidates", ipam.ErrNoCandidates},
	{"unavailable", ipam.ErrUnavailable}, {"not-in-range", ipam.ErrNotInRange},
	{"owner-conflict", ipam.ErrOwnerConflict}, {"overlap", ipam.ErrOverlap},
	{"not-found", ipam.ErrNotFound}, {"invalid", ipam.ErrInvalid}, {"not-supported", ipam.ErrNotSupported},
	{"conflict", store.ErrConflict}, {"exists", store.ErrExists}, {"claim-not-found", store.ErrNotFound},
	{"held", store.ErrHeld}, {"corrupt", store.ErrCorrupt},
	{"canceled", context.Canceled}, {"deadline", context.DeadlineExceeded},
}

func wireErr(err error) *wireError {
	if err == nil {
		return nil
	}
	w := &wireError{Msg: err.Error()}
	for _, s := range sentinels {
		if errors.Is(err, s.err) {
			w.Is = append(w.Is, s.name)
		}
	}
	var oe *ipam.OverlapError
	if errors.As(err, &oe) {
		w.Overlap = oe.Pool
	}
	return w
}

func (w *wireError) err() error {
	if w == nil {
		return nil
	}
	e := &remoteError{msg: w.Msg, overlap: w.Overlap}
	for _, name := range w.Is {
		for _, s := range sentinels {
			if s.name == name {
				e.is = append(e.is, s.err)
			}
		}
	}
	return e
}

// remoteError is an error a remote agent returned: its text, and the
// sentinels it wrapped there.
type remoteError struct {
	msg     string
	is      []error
	overlap string
}

func (e *remoteError) Error() string { return e.msg }

func (e *remoteError) Is(target error) bool {
	for _, s := range e.is {
		if s == target {
			return true
		}
	}
	return false
}

// overlapPool returns the pool an error refused for overlapping another.
func overlapPool(err error) (string, bool) {
	var oe *ipam.OverlapError
	if errors.As(err, &oe) {
		return oe.Pool, true
	}
	var re *remoteError
	if errors.As(err, &re) && re.overlap != "" {
		return re.overlap, true
	}
	return "", false
}
