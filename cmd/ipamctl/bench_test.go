package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// writeLargeList writes, as `kubectl get -o yaml` prints it, a List of pools
// pools (each a /20 of 4,093 addresses marked default: true, so every pod has
// them all as candidates), 3 nodes, 2 namespaces and pods pods spread over
// them.
func writeLargeList(w io.Writer, pools, pods int) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintln(bw, "apiVersion: v1\nitems:")
	for i := range pools {
		fmt.Fprintf(bw, `- apiVersion: spiderpool.spidernet.io/v2beta1
  kind: SpiderIPPool
  metadata:
    creationTimestamp: "2025-02-11T08:14:03Z"
    generation: 1
    name: default-v4-%02d
    resourceVersion: "%d"
    uid: 3f0c8f6e-5b1d-4a43-9d3e-%012d
  spec:
    default: true
    gateway: 10.%d.%d.1
    ipVersion: 4
    ips:
    - 10.%[4]d.%[5]d.10-10.%[4]d.%d.250
    subnet: 10.%[4]d.%[5]d.0/20
  status:
    allocatedIPCount: 0
    totalIPCount: 3825
`, i, 1000+i, i, 64+i/16, (i%16)*16, (i%16)*16+14)
	}
	for i := range 3 {
		fmt.Fprintf(bw, `- apiVersion: v1
  kind: Node
  metadata:
    labels:
      kubernetes.io/hostname: worker-%d
      topology.kubernetes.io/zone: zone-%c
    name: worker-%[1]d
  status:
    conditions:
    - status: "True"
      type: Ready
`, i, 'a'+i)
	}
	for _, ns := range []string{"default", "shop"} {
		fmt.Fprintf(bw, "- apiVersion: v1\n  kind: Namespace\n  metadata:\n    name: %s\n", ns)
	}
	for i := range pods {
		ns := []string{"default", "shop"}[i%2]
		fmt.Fprintf(bw, `- apiVersion: v1
  kind: Pod
  metadata:
    creationTimestamp: "2025-02-11T09:00:00Z"
    labels:
      app: web-%d
    name: web-%d
    namespace: %s
    uid: a1b2c3d4-2222-4a4a-8b8b-%012d
  spec:
    containers:
    - image: registry.example.com/web:1.2.3
      name: web
    nodeName: worker-%d
  status:
    phase: Running
`, i%50, i, ns, i, i%3)
	}
	fmt.Fprintln(bw, "kind: List\nmetadata:\n  resourceVersion: \"\"")
	return bw.Flush()
}

// explainPods is the number of pods of BenchmarkExplainLargeList's List. The
// default keeps CI's single run short; the figures are for 20,000.
var explainPods = flag.Int("explain-bench-pods", 2000, "BenchmarkExplainLargeList: pods in the generated List (the figures: 20000)")

var (
	ipamctlOnce sync.Once
	ipamctlDir  string
	ipamctlErr  error
	listOnce    sync.Once
	listErr     error
)

// ipamctlBinary builds the command once, into a directory TestMain removes.
func ipamctlBinary(t testing.TB) string {
	ipamctlOnce.Do(func() {
		ipamctlDir, ipamctlErr = os.MkdirTemp("", "ipamctl-bench-")
		if ipamctlErr != nil {
			return
		}
		out, err := exec.Command("go", "build", "-o", filepath.Join(ipamctlDir, "ipamctl"), ".").CombinedOutput()
		if err != nil {
			ipamctlErr = fmt.Errorf("building ipamctl: %v\n%s", err, out)
		}
	})
	require.NoError(t, ipamctlErr)
	return filepath.Join(ipamctlDir, "ipamctl")
}

// largeList writes the generated List beside the binary, once, and returns
// its path.
func largeList(t testing.TB) string {
	ipamctlBinary(t)
	path := filepath.Join(ipamctlDir, "large.yaml")
	listOnce.Do(func() {
		f, err := os.Create(path)
		if err == nil {
			err = writeLargeList(f, 40, *explainPods)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		listErr = err
	})
	require.NoError(t, listErr)
	return path
}

func TestMain(m *testing.M) {
	// A kubeconfig of the machine running the tests is no input of theirs.
	environ = func(string) string { return "" }
	code := m.Run()
	if ipamctlDir != "" {
		os.RemoveAll(ipamctlDir)
	}
	os.Exit(code)
}

// countingWriter counts what is written to it.
type countingWriter struct{ n int64 }

func (c *countingWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

// BenchmarkExplainLargeList runs `ipamctl explain` as a user does, one process
// per run, on a generated `kubectl get -o yaml` List of -explain-bench-pods
// pods and 40 default pools (about 7 MB for 20,000 pods), and reports the
// process's peak resident memory (peak-RSS-MB) and the size of its input and
// output (MB-in, MB-out) beside the time.
func BenchmarkExplainLargeList(b *testing.B) {
	bin := ipamctlBinary(b)
	input := largeList(b)
	st, err := os.Stat(input)
	require.NoError(b, err)
	for _, format := range []string{"table", "json"} {
		b.Run("o="+format, func(b *testing.B) {
			var peak int64
			var out countingWriter
			for b.Loop() {
				out.n = 0
				cmd := exec.Command(bin, "explain", "-f", input, "-o", format)
				cmd.Stdout = &out
				cmd.Stderr = io.Discard
				require.NoError(b, cmd.Run())
				if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
					peak = max(peak, ru.Maxrss) // kilobytes on Linux
				}
			}
			b.ReportMetric(float64(peak)/1024, "peak-RSS-MB")
			b.ReportMetric(float64(out.n)/1e6, "MB-out")
			b.ReportMetric(float64(st.Size())/1e6, "MB-in")
		})
	}
}
