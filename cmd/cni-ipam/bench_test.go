package main

import (
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// benchClaims are the sizes of the state directory BenchmarkPluginBinary
// runs at. The default keeps CI's single run cheap: filling 60,000 files and
// host-local's operations on them take seconds.
var benchClaims = flag.String("plugin-bench-claims", "4000",
	"BenchmarkPluginBinary: comma-separated numbers of claims already in the state directory (the figures: 4000,60000)")

// BenchmarkPluginBinary measures the plugin as a runtime calls it: one process
// per operation, CNI environment variables and the network config on stdin,
// side by side with host-local v1.9.1's binary on the same state directory.
// The directory is filled once per process, in host-local's format, with the
// given number of claims; every operation leaves it as it found it (an ADD is
// undone, a DEL's container added first, outside the timer).
//
//   - start: VERSION, which reads no state: the cost of starting the binary;
//   - ADD: a new container, round-robin after the last reserved address;
//   - DEL: without prevResult, the plugin finds the container's addresses;
//   - DEL-prevResult: with the ADD's result as prevResult, as a runtime
//     sends it (host-local ignores it);
//   - ADD-after-host-local (the plugin only): an ADD right after host-local
//     changed the directory, as during a rollout with both on one node.
//
// Before the plugin's timed operations, one untimed operation of the plugin
// brings what it keeps beside the directory up to date with what host-local
// wrote: the times are those of a node where only the plugin runs.
//
// Each plugin=cni-ipam result also reports x-host-local: host-local's time per
// operation divided by the plugin's, in the same run (for
// ADD-after-host-local, host-local's ADD).
func BenchmarkPluginBinary(b *testing.B) {
	bins := []struct{ name, path string }{
		{"host-local", hostLocal(b)},
		{pluginType, filepath.Join(pluginDir, pluginType)},
	}
	var claims []int
	for f := range strings.SplitSeq(*benchClaims, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		require.NoErrorf(b, err, "-plugin-bench-claims %q", *benchClaims)
		claims = append(claims, n)
	}
	hostLocalNs := map[string]float64{}
	measure := func(b *testing.B, key, bin string, op func()) {
		if bin != "host-local" {
			op() // untimed: b.Loop starts the timer
		}
		for b.Loop() {
			op()
		}
		ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
		if bin == "host-local" {
			hostLocalNs[key] = ns
		} else if hl, ok := hostLocalNs[key]; ok {
			b.ReportMetric(hl/ns, "x-host-local")
		}
	}
	for _, bin := range bins {
		b.Run("start/plugin="+bin.name, func(b *testing.B) {
			measure(b, "start", bin.name, func() { call{Binary: bin.path, Command: "VERSION"}.mustExec(b) })
		})
	}
	for _, n := range claims {
		dir := prefilled(b, n)
		for _, op := range []string{"ADD", "DEL", "DEL-prevResult"} {
			key := fmt.Sprintf("claims=%d/op=%s", n, op)
			for _, bin := range bins {
				b.Run(key+"/plugin="+bin.name, func(b *testing.B) {
					measure(b, key, bin.name, func() { dir.do(b, bin.path, op) })
				})
			}
		}
		b.Run(fmt.Sprintf("claims=%d/op=ADD-after-host-local/plugin=%s", n, pluginType), func(b *testing.B) {
			for b.Loop() {
				dir.do(b, bins[1].path, "ADD-after-host-local")
			}
			ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			if hl, ok := hostLocalNs[fmt.Sprintf("claims=%d/op=ADD", n)]; ok {
				b.ReportMetric(hl/ns, "x-host-local")
			}
		})
	}
}

// benchDir is a state directory filled with claims in host-local's format.
type benchDir struct {
	conf     []byte // the network config
	withPrev string // the network config with a prevResult, as a format
	next     atomic.Int64
}

var (
	benchDirsMu sync.Mutex
	benchDirs   = map[int]*benchDir{}
)

// benchSubnet holds every claim of the largest run and leaves as many
// addresses free after them, so that round robin never wraps into the filled
// part however long a run is.
const benchSubnet = "10.0.0.0/15"

// prefilled returns the state directory with n claims, filled on first use:
// fill-<k> holds the k-th address after the gateway, and last_reserved_ip.0
// the last of them, as if host-local had handed them out in order.
func prefilled(b *testing.B, n int) *benchDir {
	benchDirsMu.Lock()
	defer benchDirsMu.Unlock()
	if d := benchDirs[n]; d != nil {
		return d
	}
	dataDir := filepath.Join(pluginDir, fmt.Sprintf("bench-%d", n))
	state := filepath.Join(dataDir, "bench")
	require.NoError(b, os.MkdirAll(state, 0o755))
	prefix := netip.MustParsePrefix(benchSubnet)
	require.Less(b, 2*n, 1<<(32-prefix.Bits())-2, "-plugin-bench-claims %d: too many for %s", n, benchSubnet)
	ip := prefix.Addr().Next() // the gateway
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	const writers = 4
	for w := range writers {
		first := ip
		for range w * n / writers {
			first = first.Next()
		}
		wg.Go(func() {
			ip := first
			for k := w * n / writers; k < (w+1)*n/writers; k++ {
				ip = ip.Next()
				if err := os.WriteFile(filepath.Join(state, ip.String()), fmt.Appendf(nil, "fill-%d\r\neth0", k), 0o600); err != nil {
					select {
					case errs <- err:
					default:
					}
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	require.NoError(b, <-errs)
	for range n {
		ip = ip.Next()
	}
	require.NoError(b, os.WriteFile(filepath.Join(state, "last_reserved_ip.0"), []byte(ip.String()), 0o600))
	ipam := `"ipam": {"type": "host-local", "dataDir": ` + strconv.Quote(dataDir) + `, "ranges": [[{"subnet": "` + benchSubnet + `"}]]}`
	d := &benchDir{
		conf:     []byte(`{"cniVersion": "1.0.0", "name": "bench", "type": "bridge", ` + ipam + `}`),
		withPrev: `{"cniVersion": "1.0.0", "name": "bench", "type": "bridge", ` + ipam + `, "prevResult": %s}`,
	}
	benchDirs[n] = d
	return d
}

// do runs one timed operation op through the binary bin, and outside the
// timer what keeps the directory as it was: the plugin's DEL with prevResult
// after an ADD, the plugin's ADD before a DEL (the cheapest way back whichever
// binary is measured; both write host-local's format).
func (d *benchDir) do(b *testing.B, bin, op string) {
	id := fmt.Sprintf("bench-%d", d.next.Add(1))
	add := call{Command: "ADD", ContainerID: id, IfName: "eth0", Config: d.conf}
	del := call{Command: "DEL", ContainerID: id, IfName: "eth0", Config: d.conf}
	switch op {
	case "ADD":
		add.Binary = bin
		out := add.mustExec(b)
		b.StopTimer()
		del.Config = fmt.Appendf(nil, d.withPrev, out)
		del.mustExec(b)
		b.StartTimer()
	case "ADD-after-host-local":
		b.StopTimer()
		other := call{Binary: hostLocal(b), Command: "ADD", ContainerID: id + "-hl", IfName: "eth0", Config: d.conf}
		other.mustExec(b)
		other.Command = "DEL"
		other.mustExec(b)
		b.StartTimer()
		add.Binary = bin
		out := add.mustExec(b)
		b.StopTimer()
		del.Config = fmt.Appendf(nil, d.withPrev, out)
		del.mustExec(b)
		b.StartTimer()
	case "DEL", "DEL-prevResult":
		b.StopTimer()
		out := add.mustExec(b)
		if op == "DEL-prevResult" {
			del.Config = fmt.Appendf(nil, d.withPrev, out)
		}
		b.StartTimer()
		del.Binary = bin
		del.mustExec(b)
	default:
		b.Fatalf("unknown op %q", op)
	}
}
