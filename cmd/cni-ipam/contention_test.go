package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/stretchr/testify/require"

	"github.com/ipamkit/ipam/store"
)

// beforeCreate is the plugin's state directory with a hook that runs once,
// just before the first claim is written: what another process does between
// the plugin's choice of an address and its write.
type beforeCreate struct {
	*stateStore
	once sync.Once
	hook func()
}

func (s *beforeCreate) Create(ctx context.Context, c store.Claim) (store.Claim, error) {
	s.once.Do(s.hook)
	return s.stateStore.Create(ctx, c)
}

func (s *beforeCreate) CreateAndSetCursor(ctx context.Context, c store.Claim) (store.Claim, error) {
	s.once.Do(s.hook)
	return s.stateStore.CreateAndSetCursor(ctx, c)
}

// beforeCreateExclusive is beforeCreate over a file store that has
// CreateExclusive, which the plugin then uses.
type beforeCreateExclusive struct{ *beforeCreate }

func (s beforeCreateExclusive) CreateExclusive(ctx context.Context, c store.Claim) (store.Claim, error) {
	s.once.Do(s.hook)
	return exclusiveStateStore{s.stateStore}.CreateExclusive(ctx, c)
}

// hooked returns the plugin's store st with hook run before its first write
// of a claim, with the capabilities st has.
func hooked(st store.Store, hook func()) store.Store {
	switch st := st.(type) {
	case *stateStore:
		return &beforeCreate{stateStore: st, hook: hook}
	case exclusiveStateStore:
		return beforeCreateExclusive{&beforeCreate{stateStore: st.stateStore, hook: hook}}
	}
	panic(fmt.Sprintf("hooked: %T is not the plugin's store", st))
}

// TestExhaustedOnlyWhenFull: while the plugin serves an ADD, host-local (another
// process) releases one address and takes the one the plugin was about to
// take. One address is still free, and the plugin must hand it out, as
// host-local does: exhaustion is reported only when the state directory,
// read under its lock, has no free address.
func TestExhaustedOnlyWhenFull(t *testing.T) {
	t.Parallel()
	hl := hostLocal(t)
	dataDir := t.TempDir()
	// A /29: .2 to .6 (.1 is the gateway, .7 the broadcast).
	conf := netconf(t, `{"cniVersion": "1.0.0", "name": "race", "ipam": {"ranges": [[{"subnet": "10.61.0.0/29"}]]}}`, dataDir)
	for _, id := range []string{"a", "b", "c", "d"} { // .2 to .5
		call{Binary: hl, Command: "ADD", ContainerID: id, IfName: "eth0", Config: conf}.mustExec(t)
	}
	other := func() {
		call{Binary: hl, Command: "DEL", ContainerID: "a", IfName: "eth0", Config: conf}.mustExec(t) // frees .2
		call{Binary: hl, Command: "ADD", ContainerID: "f", IfName: "eth0", Config: conf}.mustExec(t) // takes .6
	}
	var out strings.Builder
	p := &plugin{stdout: &out, warn: io.Discard, timeout: defaultTimeout,
		open: func(dir string, pools []poolLoc, sync bool) (store.Store, io.Closer, error) {
			st, c, err := openState(dir, pools, sync)
			if err != nil {
				return nil, nil, err
			}
			return hooked(st, other), c, nil
		}}
	require.NoError(t, p.cmdAdd(&skel.CmdArgs{ContainerID: "e", IfName: "eth0", StdinData: conf}))
	require.Equal(t, []string{"10.61.0.2/29 10.61.0.1"}, parseAdd(t, []byte(out.String())).addresses())
	allocs, _ := stateDir(t, filepath.Join(dataDir, "race"))
	require.Equal(t, map[string]string{
		"10.61.0.2": "e\r\neth0", "10.61.0.3": "b\r\neth0", "10.61.0.4": "c\r\neth0",
		"10.61.0.5": "d\r\neth0", "10.61.0.6": "f\r\neth0",
	}, allocs)
}

var sideBySideOps = flag.Int("side-by-side-ops", 1200, "operations of TestSideBySideWithHostLocal, over 8 workers")

// TestSideBySideWithHostLocal runs host-local and the plugin on one state
// directory under load, as during a rollout: 8 workers each add and delete
// containers in a /28 that cannot hold all they want, each operation through
// host-local or the plugin at random. No address is ever held by two
// containers, the directory ends holding exactly the live containers'
// addresses, and the plugin reports a full range set no more often than
// host-local does on the same run (at most 1.5 times its rate).
func TestSideBySideWithHostLocal(t *testing.T) {
	t.Parallel()
	const workers, perWorker = 8, 4 // 32 wanted, 13 addresses
	hl := hostLocal(t)
	bins := []string{"host-local", pluginType}
	paths := map[string]string{"host-local": hl, pluginType: filepath.Join(pluginDir, pluginType)}
	dataDir := t.TempDir()
	conf := netconf(t, `{"cniVersion": "1.0.0", "name": "rollout", "ipam": {"ranges": [[{"subnet": "10.62.0.0/28"}]]}}`, dataDir)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d (-side-by-side-ops %d)", seed, *sideBySideOps)

	var (
		mu        sync.Mutex
		holder    = map[string]string{} // address → container
		addrOf    = map[string]string{} // container → address
		adds      = map[string]int{}
		exhausted = map[string]int{}
		failures  []string
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		failures = append(failures, fmt.Sprintf(format, args...))
	}
	var wg sync.WaitGroup
	for w := range workers {
		rng := rand.New(rand.NewPCG(seed, uint64(w)))
		wg.Go(func() {
			var held []string
			for op := range *sideBySideOps / workers {
				bin := bins[rng.IntN(len(bins))]
				add := len(held) == 0 || (len(held) < perWorker && rng.IntN(2) == 0)
				if add {
					id := fmt.Sprintf("w%d-%d", w, op)
					out, cerr, err := call{Binary: paths[bin], Command: "ADD", ContainerID: id, IfName: "eth0", Config: conf}.run()
					mu.Lock()
					adds[bin]++
					mu.Unlock()
					switch {
					case err != nil:
						fail("%s ADD %s: %v", bin, id, err)
						return
					case cerr != nil && strings.Contains(cerr.Msg, "no IP addresses available"):
						mu.Lock()
						exhausted[bin]++
						mu.Unlock()
						continue
					case cerr != nil:
						fail("%s ADD %s: %+v", bin, id, cerr)
						return
					}
					var r addResult
					if err := json.Unmarshal(out, &r); err != nil || len(r.IPs) != 1 {
						fail("%s ADD %s: result %s: %v", bin, id, out, err)
						return
					}
					ip := strings.Split(r.IPs[0].Address, "/")[0]
					mu.Lock()
					if other, taken := holder[ip]; taken {
						failures = append(failures, fmt.Sprintf("%s ADD %s: %s, held by %s", bin, id, ip, other))
					}
					holder[ip], addrOf[id] = id, ip
					mu.Unlock()
					held = append(held, id)
					continue
				}
				i := rng.IntN(len(held))
				id := held[i]
				held = append(held[:i], held[i+1:]...)
				// Free in the book first: once the DEL starts, another may get
				// the address as soon as the file is gone.
				mu.Lock()
				delete(holder, addrOf[id])
				delete(addrOf, id)
				mu.Unlock()
				if _, cerr, err := (call{Binary: paths[bin], Command: "DEL", ContainerID: id, IfName: "eth0", Config: conf}).run(); err != nil || cerr != nil {
					fail("%s DEL %s: %v %+v", bin, id, err, cerr)
					return
				}
			}
		})
	}
	wg.Wait()
	require.Empty(t, failures, "seed %d", seed)

	want := map[string]string{}
	for ip, id := range holder {
		want[ip] = id + "\r\neth0"
	}
	allocs, _ := stateDir(t, filepath.Join(dataDir, "rollout"))
	require.Equal(t, want, allocs, "seed %d: the state directory holds the live containers' addresses, no more", seed)

	rate := func(bin string) float64 { return float64(exhausted[bin]) / float64(max(adds[bin], 1)) }
	for _, bin := range bins {
		t.Logf("%s: %d ADDs, %d exhausted (%.1f %%)", bin, adds[bin], exhausted[bin], 100*rate(bin))
	}
	require.NotZero(t, exhausted["host-local"], "seed %d: the run did not contend for addresses", seed)
	require.LessOrEqualf(t, rate(pluginType), 1.5*rate("host-local"),
		"seed %d: the plugin reported exhaustion %.1f %% of the time, host-local %.1f %%", seed, 100*rate(pluginType), 100*rate("host-local"))
}
