package ipamtest

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/gc"
	"github.com/ipamkit/ipam/store"
)

// simAgent is one agent of a Sim: an Allocator in this process, or one
// served by another process (a RemoteAgent).
type simAgent struct {
	id     int
	alloc  *ipam.Allocator // in this process
	own    store.Store     // the Store instance opened for it, if any
	remote *RemoteAgent
}

func (a *simAgent) String() string {
	if a.remote != nil {
		return fmt.Sprintf("agent %d (process %d)", a.id, a.remote.pid())
	}
	return fmt.Sprintf("agent %d", a.id)
}

// gcCall is one garbage collection: the snapshot's contents, its time, and
// the options.
type gcCall struct {
	Now  time.Time        `json:"now"`
	Pods []gc.Pod         `json:"pods"`
	Sets []gc.StatefulSet `json:"sets"`
	Opts gc.Options       `json:"opts"`
}

// collectWith runs c through a: a snapshot of its pods taken at its time,
// then gc.Collect.
func (c gcCall) collectWith(ctx context.Context, a *ipam.Allocator) ([]gc.Decision, error) {
	snap, err := gc.NewSnapshot(c.Now, c.Pods, c.Sets)
	if err != nil {
		return nil, fmt.Errorf("the simulator's snapshot: %w", err)
	}
	return gc.Collect(ctx, a, snap, c.Now, c.Opts)
}

func (a *simAgent) allocate(ctx context.Context, req ipam.Request, now time.Time) (ipam.Result, error) {
	if a.remote != nil {
		return a.remote.allocate(ctx, req, now)
	}
	return a.alloc.AllocateAt(ctx, req, now)
}

func (a *simAgent) release(ctx context.Context, owner store.Owner, now time.Time) error {
	if a.remote != nil {
		return a.remote.release(ctx, owner, now)
	}
	return a.alloc.ReleaseAt(ctx, owner, now)
}

func (a *simAgent) lookup(ctx context.Context, owner store.Owner) ([]store.Claim, error) {
	if a.remote != nil {
		return a.remote.lookup(ctx, owner)
	}
	return a.alloc.Lookup(ctx, owner)
}

func (a *simAgent) collect(ctx context.Context, c gcCall) ([]gc.Decision, error) {
	if a.remote != nil {
		return a.remote.collect(ctx, c)
	}
	return c.collectWith(ctx, a.alloc)
}

// setPools tells a remote agent the pools as they are defined now; an
// agent in this process reads them from the Sim's PoolSource.
func (a *simAgent) setPools(ctx context.Context, pools []*ipam.Pool) error {
	if a.remote == nil {
		return nil
	}
	return a.remote.setPools(ctx, pools)
}

// close closes the Store instance opened for the agent, if it can be.
func (a *simAgent) close() error {
	c, ok := a.own.(io.Closer)
	a.own = nil
	if !ok {
		return nil
	}
	return c.Close()
}

// agentFor returns the agent that serves an operation on p: drawn at random
// in the many-writers mode, else the agent of p's node.
func (s *Sim) agentFor(p *simPod) int {
	if s.opts.Writers {
		return s.rng.IntN(len(s.agents))
	}
	return p.node.agent
}

// gcAgent returns the agent that collects garbage: drawn at random in the
// many-writers mode, else agent 0.
func (s *Sim) gcAgent() int {
	if s.opts.Writers {
		return s.rng.IntN(len(s.agents))
	}
	return 0
}

// otherAgent draws an agent other than those given, or -1 if there is none.
func (s *Sim) otherAgent(not ...int) int {
	n := len(s.agents)
	free := make([]int, 0, n)
	for i := range n {
		skip := false
		for _, x := range not {
			skip = skip || x == i
		}
		if !skip {
			free = append(free, i)
		}
	}
	if len(free) == 0 {
		return -1
	}
	return free[s.rng.IntN(len(free))]
}

// agentNote names agent ag in the history, in the many-writers mode only.
func (s *Sim) agentNote(ag int) string {
	if !s.opts.Writers {
		return ""
	}
	return s.agents[ag].String()
}
