package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/stretchr/testify/require"

	"github.com/ipamkit/ipam/store"
	"github.com/ipamkit/ipam/store/memstore"
)

// TestErrorJSON checks the CNI error the binary prints for bad input and
// failed allocations: its code, and that its message names the problem.
func TestErrorJSON(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	tests := []struct {
		name   string
		conf   string // with dataDir set, unless it is not JSON
		args   string
		code   uint
		msg    []string // substrings of msg + details
		before func(t *testing.T)
		inFile bool // dataDir is a regular file
		asIs   bool // conf without dataDir
	}{
		{name: "malformed JSON", conf: `{"cniVersion": "1.0.0", "name": "n", "ipam": {`, code: types.ErrDecodingFailure, msg: []string{"unexpected end of JSON input"}},
		{name: "wrong JSON type", conf: `{"cniVersion": "1.0.0", "name": "n", "ipam": {"ranges": "10.0.0.0/24"}}`, code: types.ErrDecodingFailure, msg: []string{"ranges"}},
		{name: "no ipam", conf: `{"cniVersion": "1.0.0", "name": "n"}`, code: types.ErrInvalidNetworkConfig, msg: []string{"'ipam'"}},
		{name: "no ranges", conf: `{"cniVersion": "1.0.0", "name": "n", "ipam": {}}`, code: types.ErrInvalidNetworkConfig, msg: []string{"no IP ranges specified"}},
		{name: "bad CIDR", conf: `{"cniVersion": "1.0.0", "name": "n", "ipam": {"ranges": [[{"subnet": "10.0.0.0/33"}]]}}`, code: types.ErrInvalidNetworkConfig, msg: []string{"10.0.0.0/33"}},
		{name: "subnet too small", conf: `{"cniVersion": "1.0.0", "name": "n", "ipam": {"ranges": [[{"subnet": "10.0.0.0/31"}]]}}`, code: types.ErrInvalidNetworkConfig, msg: []string{"invalid range set 0", "10.0.0.0/31"}},
		{name: "overlapping sets", conf: `{"cniVersion": "1.0.0", "name": "n", "ipam": {"ranges": [[{"subnet": "10.0.0.0/24"}], [{"subnet": "10.0.0.0/25"}]]}}`, code: types.ErrInvalidNetworkConfig, msg: []string{"range set 0 overlaps with 1"}},
		{name: "missing resolvConf", conf: `{"cniVersion": "1.0.0", "name": "n", "ipam": {"ranges": [[{"subnet": "10.9.0.0/24"}]], "resolvConf": "/nonexistent/resolv.conf"}}`, code: types.ErrInvalidNetworkConfig, msg: []string{"/nonexistent/resolv.conf"}},
		{name: "malformed CNI_ARGS", conf: `{"cniVersion": "1.0.0", "name": "n", "ipam": {"ranges": [[{"subnet": "10.0.0.0/24"}]]}}`, args: "IP=bogus", code: types.ErrInvalidEnvironmentVariables, msg: []string{"CNI_ARGS", "IP=bogus"}},
		{name: "unknown CNI_ARGS", conf: `{"cniVersion": "1.0.0", "name": "n", "ipam": {"ranges": [[{"subnet": "10.0.0.0/24"}]]}}`, args: "ip=10.0.0.9", code: types.ErrInvalidEnvironmentVariables, msg: []string{"CNI_ARGS", "ip=10.0.0.9"}},
		{name: "requested IP in no range", conf: `{"cniVersion": "1.0.0", "name": "n", "ipam": {"ranges": [[{"subnet": "10.1.0.0/24"}]]}}`, args: "IP=10.99.0.9", code: types.ErrInternal, msg: []string{"10.99.0.9"}},
		{
			name: "exhausted", conf: `{"cniVersion": "1.0.0", "name": "full", "ipam": {"ranges": [[{"subnet": "10.2.0.0/24"}], [{"subnet": "10.3.0.0/30"}]]}}`,
			code: types.ErrInternal, msg: []string{"failed to allocate for range 1: no IP addresses available in range set: 10.3.0.1-10.3.0.2"},
			before: func(t *testing.T) {
				writeState(t, filepath.Join(dataDir, "full"), map[string]string{"10.3.0.2": "someone\r\neth0"})
			},
		},
		{name: "dataDir not a directory", conf: `{"cniVersion": "1.0.0", "name": "n", "ipam": {"ranges": [[{"subnet": "10.0.0.0/24"}]]}}`, inFile: true, code: types.ErrIOFailure, msg: []string{"opening state directory"}},
		{name: "pools and ranges", conf: `{"cniVersion": "1.0.0", "name": "n", "ipam": {"ranges": [[{"subnet": "10.0.0.0/24"}]], "pools": [{"name": "a", "subnet": "10.5.0.0/24", "ips": ["10.5.0.2"]}]}}`, code: types.ErrInvalidNetworkConfig, msg: []string{"mutually exclusive"}},
		{name: "pool without name", conf: `{"cniVersion": "1.0.0", "name": "n", "ipam": {"pools": [{"subnet": "10.5.0.0/24", "ips": ["10.5.0.2"]}]}}`, code: types.ErrInvalidNetworkConfig, msg: []string{"ipam.pools[0]: name"}},
		{name: "unknown default pool", conf: `{"cniVersion": "1.0.0", "name": "n", "ipam": {"pools": [{"name": "a", "subnet": "10.5.0.0/24", "ips": ["10.5.0.2"]}], "default_ipv4_ippool": ["nosuch"]}}`, code: types.ErrInvalidNetworkConfig, msg: []string{`"nosuch"`}},
		{name: "etcd in a plugin built without it", conf: `{"cniVersion": "1.0.0", "name": "n", "ipam": {"ranges": [[{"subnet": "10.0.0.0/24"}]], "etcd": {"endpoints": ["http://127.0.0.1:2379"]}}}`, code: types.ErrInvalidNetworkConfig, msg: []string{"ipam.etcd", "-tags etcd"}, asIs: true},
		{name: "etcd and dataDir", conf: `{"cniVersion": "1.0.0", "name": "n", "ipam": {"ranges": [[{"subnet": "10.0.0.0/24"}]], "etcd": {"endpoints": ["http://127.0.0.1:2379"]}}}`, code: types.ErrInvalidNetworkConfig, msg: []string{"etcd and dataDir are mutually exclusive"}},
		{name: "kubernetes in a plugin built without it", conf: `{"cniVersion": "1.0.0", "name": "n", "ipam": {"kubernetes": {"kubeconfig": "/etc/kubeconfig"}, "default_ipv4_ippool": ["a"]}}`, code: types.ErrInvalidNetworkConfig, msg: []string{"ipam.kubernetes", "-tags kubernetes"}, asIs: true},
		{name: "kubernetes and pools", conf: `{"cniVersion": "1.0.0", "name": "n", "ipam": {"kubernetes": {}, "pools": [{"name": "a", "subnet": "10.5.0.0/24", "ips": ["10.5.0.2"]}]}}`, code: types.ErrInvalidNetworkConfig, msg: []string{"ipam.kubernetes", "cannot be given with it"}, asIs: true},
		{name: "kubernetes and dataDir", conf: `{"cniVersion": "1.0.0", "name": "n", "ipam": {"kubernetes": {}}}`, code: types.ErrInvalidNetworkConfig, msg: []string{"kubernetes, etcd and dataDir are mutually exclusive"}},
		{name: "kubernetes and etcd", conf: `{"cniVersion": "1.0.0", "name": "n", "ipam": {"kubernetes": {}, "etcd": {"endpoints": ["http://127.0.0.1:2379"]}}}`, code: types.ErrInvalidNetworkConfig, msg: []string{"kubernetes, etcd and dataDir are mutually exclusive"}, asIs: true},
		{name: "requested IP with kubernetes", conf: `{"cniVersion": "1.0.0", "name": "n", "ipam": {"kubernetes": {}}}`, args: "IP=10.5.0.2", code: types.ErrInvalidNetworkConfig, msg: []string{"need ipam.ranges"}, asIs: true},
		{name: "requested IP with pools", conf: `{"cniVersion": "1.0.0", "name": "n", "ipam": {"pools": [{"name": "a", "subnet": "10.5.0.0/24", "ips": ["10.5.0.2"]}], "default_ipv4_ippool": ["a"]}}`, args: "IP=10.5.0.2", code: types.ErrInvalidNetworkConfig, msg: []string{"need ipam.ranges"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conf := []byte(tt.conf)
			switch {
			case tt.inFile:
				file := filepath.Join(t.TempDir(), "file")
				require.NoError(t, os.WriteFile(file, nil, 0o644))
				conf = netconf(t, tt.conf, file)
			case tt.name != "malformed JSON" && !tt.asIs:
				conf = netconf(t, tt.conf, dataDir)
			}
			if tt.before != nil {
				tt.before(t)
			}
			cerr := call{Command: "ADD", ContainerID: "c1", IfName: "eth0", Args: tt.args, Config: conf}.mustFail(t)
			require.Equalf(t, tt.code, cerr.Code, "code of %+v", cerr)
			for _, m := range tt.msg {
				require.Contains(t, cerr.Msg+"\n"+cerr.Details, m)
			}
		})
	}
}

// faultStore wraps a store to count its List calls and to fail or block its
// writes: the faults a file store meets under contention.
type faultStore struct {
	cursorStore
	lists       atomic.Int64
	deleteErr   error
	blockCreate bool
}

func (s *faultStore) List(ctx context.Context, pool string) ([]store.Claim, error) {
	s.lists.Add(1)
	return s.cursorStore.List(ctx, pool)
}

func (s *faultStore) Create(ctx context.Context, c store.Claim) (store.Claim, error) {
	if s.blockCreate {
		<-ctx.Done()
		return store.Claim{}, ctx.Err()
	}
	return s.cursorStore.Create(ctx, c)
}

func (s *faultStore) Delete(ctx context.Context, pool string, ip netip.Addr, rev int64) error {
	if s.deleteErr != nil {
		return s.deleteErr
	}
	return s.cursorStore.Delete(ctx, pool, ip, rev)
}

// inProcess returns a plugin whose every invocation opens st.
func inProcess(st store.Store, timeout time.Duration) (*plugin, *bytes.Buffer) {
	var out bytes.Buffer
	return &plugin{
		open:    func(string, []poolLoc, bool) (store.Store, io.Closer, error) { return st, io.NopCloser(nil), nil },
		stdout:  &out,
		warn:    io.Discard,
		timeout: timeout,
	}, &out
}

func cniCode(t *testing.T, err error) *types.Error {
	t.Helper()
	require.Error(t, err)
	var te *types.Error
	require.Truef(t, errors.As(err, &te), "not a CNI error: %v", err)
	return te
}

const smallNet = `{"cniVersion": "1.1.0", "name": "n", "ipam": {"ranges": [[{"subnet": "10.40.0.0/24"}]]}}`

// TestConflictIsTryAgain: a store write that keeps losing its revision check
// (someone else changed the claim each time) is code 11, try again later.
func TestConflictIsTryAgain(t *testing.T) {
	t.Parallel()
	fs := &faultStore{cursorStore: memstore.New()}
	p, _ := inProcess(fs, defaultTimeout)
	args := &skel.CmdArgs{ContainerID: "c1", IfName: "eth0", StdinData: []byte(smallNet)}
	require.NoError(t, p.cmdAdd(args))
	fs.deleteErr = store.ErrConflict
	te := cniCode(t, p.cmdDel(args))
	require.Equal(t, types.ErrTryAgainLater, te.Code, "%+v", te)
	require.Contains(t, te.Msg, "10.40.0.2")
}

// TestDeadlineIsTryAgain: a store that does not answer within the
// invocation's deadline is code 11.
func TestDeadlineIsTryAgain(t *testing.T) {
	t.Parallel()
	fs := &faultStore{cursorStore: memstore.New(), blockCreate: true}
	p, _ := inProcess(fs, 100*time.Millisecond)
	te := cniCode(t, p.cmdAdd(&skel.CmdArgs{ContainerID: "c1", IfName: "eth0", StdinData: []byte(smallNet)}))
	require.Equal(t, types.ErrTryAgainLater, te.Code, "%+v", te)
	require.Contains(t, te.Msg, "deadline")
}

// TestLockHeldIsTryAgain: the file store waits for the state directory's
// flock, which another process (here, this test through its own descriptor)
// holds, when it opens the directory and when it writes; the deadline ends
// either wait with code 11, the plugin returns at once, and the directory is
// untouched.
func TestLockHeldIsTryAgain(t *testing.T) {
	t.Parallel()
	for _, when := range []string{"open", "write"} {
		t.Run(when, func(t *testing.T) {
			dataDir := t.TempDir()
			dir := filepath.Join(dataDir, "n")
			var lock *os.File
			take := func() {
				var err error
				lock, err = os.OpenFile(filepath.Join(dir, "lock"), os.O_RDONLY|os.O_CREATE, 0o750)
				require.NoError(t, err)
				require.NoError(t, syscall.Flock(int(lock.Fd()), syscall.LOCK_EX))
			}
			p := &plugin{stdout: io.Discard, warn: io.Discard, timeout: 200 * time.Millisecond, open: openState}
			if when == "open" {
				require.NoError(t, os.MkdirAll(dir, 0o755))
				take()
			} else {
				p.open = func(dir string, pools []poolLoc, sync bool) (store.Store, io.Closer, error) {
					st, c, err := openState(dir, pools, sync)
					if err == nil {
						take()
					}
					return st, c, err
				}
			}
			conf := netconf(t, smallNet, dataDir)
			start := time.Now()
			te := cniCode(t, p.cmdAdd(&skel.CmdArgs{ContainerID: "c1", IfName: "eth0", StdinData: conf}))
			require.Equal(t, types.ErrTryAgainLater, te.Code, "%+v", te)
			// The call's 200 ms timeout, not the default 100 s, ended it: a
			// generous bound, which holds on a loaded machine.
			require.Less(t, time.Since(start), 30*time.Second)
			allocs, _ := stateDir(t, dir)
			require.Empty(t, allocs)
			require.NoError(t, lock.Close())
			// With the lock free again, the same call succeeds.
			p.open, p.timeout = openState, defaultTimeout
			require.NoError(t, p.cmdAdd(&skel.CmdArgs{ContainerID: "c1", IfName: "eth0", StdinData: conf}))
		})
	}
}

// TestDelWithPrevResultReadsNoList: a DEL releases the container's addresses
// without listing the pool's claims, with a prevResult or without (the Store
// answers what the container holds), so its cost does not grow with them.
func TestDelWithPrevResultReadsNoList(t *testing.T) {
	t.Parallel()
	fs := &faultStore{cursorStore: memstore.New()}
	p, out := inProcess(fs, defaultTimeout)
	for _, id := range []string{"a", "b", "c"} {
		out.Reset()
		require.NoError(t, p.cmdAdd(&skel.CmdArgs{ContainerID: id, IfName: "eth0", StdinData: []byte(smallNet)}))
	}
	withPrev := []byte(`{"cniVersion": "1.1.0", "name": "n", "ipam": {"ranges": [[{"subnet": "10.40.0.0/24"}]]},
		"prevResult": ` + out.String() + `}`)
	fs.lists.Store(0)
	require.NoError(t, p.cmdDel(&skel.CmdArgs{ContainerID: "c", IfName: "eth0", StdinData: withPrev}))
	require.Zero(t, fs.lists.Load(), "List calls of a DEL with prevResult")
	_, err := fs.Get(context.Background(), rangeSetPool(0), netip.MustParseAddr("10.40.0.4"))
	require.ErrorIs(t, err, store.ErrNotFound)

	require.NoError(t, p.cmdDel(&skel.CmdArgs{ContainerID: "b", IfName: "eth0", StdinData: []byte(smallNet)}))
	require.Zero(t, fs.lists.Load(), "List calls of a DEL without prevResult")
	cs, err := fs.List(context.Background(), rangeSetPool(0))
	require.NoError(t, err)
	require.Len(t, cs, 1)
	require.Equal(t, "a", cs[0].Owner.ContainerID)
}

// TestSyncOption: ipam.sync (default false, as host-local writes without
// fsync) reaches the state directory's opener, in both config forms.
func TestSyncOption(t *testing.T) {
	for _, tc := range []struct {
		conf string
		want bool
	}{
		{`{"cniVersion": "1.1.0", "name": "n", "ipam": {"ranges": [[{"subnet": "10.40.0.0/24"}]]}}`, false},
		{`{"cniVersion": "1.1.0", "name": "n", "ipam": {"ranges": [[{"subnet": "10.40.0.0/24"}]], "sync": true}}`, true},
		{`{"cniVersion": "1.1.0", "name": "n", "ipam": {"pools": [{"name": "p", "subnet": "10.40.0.0/24", "ips": ["10.40.0.10-10.40.0.20"], "default": true}], "sync": true}}`, true},
	} {
		var got []bool
		p := &plugin{stdout: io.Discard, warn: io.Discard, timeout: defaultTimeout,
			open: func(dir string, pools []poolLoc, sync bool) (store.Store, io.Closer, error) {
				got = append(got, sync)
				return memstore.New(), io.NopCloser(nil), nil
			}}
		require.NoError(t, p.cmdAdd(&skel.CmdArgs{ContainerID: "c1", IfName: "eth0", StdinData: []byte(tc.conf)}), tc.conf)
		require.Equal(t, []bool{tc.want}, got, tc.conf)
	}
}
