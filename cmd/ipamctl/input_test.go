package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/ipamkit/ipam"
)

// listYAML is a List as `kubectl get -o yaml` prints it, with a bad pool as
// its second item (line 11) and a pod without a name as its fourth (line 27).
const listYAML = `apiVersion: v1
items:
- apiVersion: spiderpool.spidernet.io/v2beta1
  kind: SpiderIPPool
  metadata:
    name: good-v4
  spec:
    default: true
    ips: [10.90.0.10-10.90.0.20]
    subnet: 10.90.0.0/24
- apiVersion: spiderpool.spidernet.io/v2beta1
  kind: SpiderIPPool
  metadata:
    name: typo-v4
  spec:
    # a comment inside an item
    subnet: 10.91.0.0/33
- apiVersion: v1
  kind: Pod
  metadata:
    name: web-0
    namespace: default
    uid: u-web-0
  spec:
    nodeName: worker-1
- apiVersion: v1
  kind: Pod
  metadata:
    namespace: default
kind: List
metadata:
  resourceVersion: ""
`

// writeTemp writes data to a file of the test's own and returns its path.
func writeTemp(t *testing.T, name, data string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, []byte(data), 0o644))
	return path
}

// TestListItemLines: a problem in a List item points at the line the item
// starts on, in a List as kubectl prints it (YAML or JSON), in one whose
// items are indented, and for an item that is not even YAML.
func TestListItemLines(t *testing.T) {
	indented := strings.ReplaceAll(listYAML, "\n- ", "\n  - ")
	indented = strings.ReplaceAll(indented, "\n  ", "\n    ")
	indented = strings.ReplaceAll(indented, "\n    - ", "\n  - ")
	indented = strings.ReplaceAll(indented, "\n    resourceVersion", "\n  resourceVersion")
	jsonData, err := yaml.YAMLToJSON([]byte(listYAML))
	require.NoError(t, err)
	var pretty bytes.Buffer
	require.NoError(t, json.Indent(&pretty, jsonData, "", "  "))
	jsonLine := func(name string) int { // the line of the "{" of the item holding name
		lines := strings.Split(pretty.String(), "\n")
		for i, l := range lines {
			if strings.Contains(l, name) {
				for j := i; j >= 0; j-- {
					if lines[j] == "    {" {
						return j + 1
					}
				}
			}
		}
		t.Fatalf("%s not in the JSON", name)
		return 0
	}
	for _, tt := range []struct {
		name, data string
		want       []string
	}{
		{"kubectl yaml", listYAML, []string{
			`:11: document 1, items[1] (SpiderIPPool typo-v4): spec.subnet "10.91.0.0/33": invalid CIDR address`,
			`:26: document 1, items[3] (Pod): metadata.name: required`}},
		{"indented items", indented, []string{
			`:11: document 1, items[1] (SpiderIPPool typo-v4): spec.subnet "10.91.0.0/33": invalid CIDR address`,
			`:26: document 1, items[3] (Pod): metadata.name: required`}},
		{"kubectl json", pretty.String(), []string{
			`:` + strconv.Itoa(jsonLine("typo-v4")) + `: document 1, items[1] (SpiderIPPool typo-v4): spec.subnet "10.91.0.0/33": invalid CIDR address`}},
		{"malformed item", strings.Replace(listYAML, "    subnet: 10.91.0.0/33", "    subnet: [10.91.0.0/24", 1), []string{
			`:11: document 1, items[1]: malformed YAML: yaml: line 17: did not find expected ',' or ']'`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			stdout, _, code := runCmd(t, "validate", "-f", writeTemp(t, "list", tt.data))
			require.Equal(t, exitProblem, code, stdout)
			for _, w := range tt.want {
				require.Contains(t, stdout, w)
			}
			require.NotContains(t, stdout, ":1: document 1, items")
		})
	}
}

// TestStdin: -f - reads standard input, named "stdin" in messages; it can
// be named once.
func TestStdin(t *testing.T) {
	cluster, err := os.ReadFile("testdata/cluster.yaml")
	require.NoError(t, err)
	stdout, stderr, code := runStdin(t, bytes.NewReader(cluster), "validate", "-f", "-")
	require.Equal(t, exitOK, code, stderr)
	require.True(t, strings.HasPrefix(stdout, "ok: "), stdout)

	fromFile, _, _ := runCmd(t, "explain", "-f", "testdata/cluster.yaml", "-o", "json")
	fromStdin, _, code := runStdin(t, bytes.NewReader(cluster), "explain", "-f", "-", "-o", "json")
	require.Equal(t, exitOK, code)
	require.Equal(t, fromFile, fromStdin)

	stdout, _, code = runStdin(t, strings.NewReader(listYAML), "validate", "-f", "-")
	require.Equal(t, exitProblem, code)
	require.Contains(t, stdout, "stdin:11: document 1, items[1] (SpiderIPPool typo-v4)")

	_, stderr, code = runCmd(t, "validate", "-f", "-", "-f", "-")
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr, `"-" (standard input) named twice`)
}

// endless is a stream that never ends.
type endless struct{}

func (endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = "y\n"[i%2]
	}
	return len(p), nil
}

// TestInputLimit: an input larger than -max-input is not read further: the
// command ends with an error that names the file and the flag. This holds
// for a file without end (/dev/zero) and a stream without end.
func TestInputLimit(t *testing.T) {
	want := "cannot read: over the input size limit: more than 1MiB read (raise it with -max-input)"
	stdout, _, code := runCmd(t, "validate", "-max-input", "1MiB", "-f", "/dev/zero")
	require.Equal(t, exitProblem, code)
	require.Contains(t, stdout, "/dev/zero: "+want)

	stdout, _, code = runStdin(t, endless{}, "validate", "-max-input", "1MiB", "-f", "-")
	require.Equal(t, exitProblem, code)
	require.Contains(t, stdout, "stdin: "+want)

	// Other files are still read; explain says the same on stderr.
	_, stderr, code := runStdin(t, endless{}, "explain", "-max-input", "1MiB", "-f", "testdata/cluster.yaml", "-f", "-")
	require.Equal(t, exitProblem, code)
	require.Contains(t, stderr, "stdin: "+want)

	_, stderr, code = runCmd(t, "validate", "-max-input", "lots", "-f", "/dev/zero")
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr, `"lots": want a positive size`)
}

// TestInputLimitDefault: the binary, with its default limit, on /dev/zero
// and on a pipe whose writer never stops, ends with the error.
func TestInputLimitDefault(t *testing.T) {
	if testing.Short() {
		t.Skip("reads 256 MiB twice")
	}
	bin := ipamctlBinary(t)
	want := "cannot read: over the input size limit: more than 256MiB read (raise it with -max-input)"

	out, err := exec.Command(bin, "validate", "-f", "/dev/zero").Output()
	require.Error(t, err)
	require.Contains(t, string(out), "/dev/zero: "+want)

	r, w, err := os.Pipe()
	require.NoError(t, err)
	go func() {
		io.Copy(w, endless{}) // until the reader is gone
		w.Close()
	}()
	cmd := exec.Command(bin, "validate", "-f", "-")
	cmd.Stdin = r
	out, err = cmd.Output()
	r.Close()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, exitProblem, ee.ExitCode())
	require.Contains(t, string(out), "stdin: "+want)
}

// TestSkippedKinds: objects of kinds ipamctl does not read (what `kubectl
// get all` returns, Spiderpool's other kinds) are skipped with a note on
// stderr, and are not problems.
func TestSkippedKinds(t *testing.T) {
	var b strings.Builder
	b.WriteString(listYAML[:strings.Index(listYAML, "- apiVersion: spiderpool.spidernet.io/v2beta1\n  kind: SpiderIPPool\n  metadata:\n    name: typo-v4")])
	for _, kind := range []string{"SpiderEndpoint", "SpiderMultusConfig", "Service", "ConfigMap", "Ingress", "Service"} {
		b.WriteString("- apiVersion: x/v1\n  kind: " + kind + "\n  metadata:\n    name: x\n")
	}
	b.WriteString("kind: List\n")
	path := writeTemp(t, "all.yaml", b.String())
	for _, cmd := range []string{"validate", "explain", "gc"} {
		stdout, stderr, code := runCmd(t, cmd, "-f", path)
		require.Equalf(t, exitOK, code, "%s:\n%s\n%s", cmd, stdout, stderr)
		require.Containsf(t, stderr, "ipamctl: note: 6 objects skipped: ipamctl does not read their kinds", "%s", cmd)
		require.Contains(t, stderr, "  SpiderEndpoint: 1, the first at "+path+":11\n")
		require.Contains(t, stderr, "  Service: 2, the first at "+path+":19\n")
		require.NotContains(t, stdout+stderr, "problem")
	}
}

// overlapping holds two pools with overlapping addresses, the second left out.
const overlapping = `apiVersion: spiderpool.spidernet.io/v2beta1
kind: SpiderIPPool
metadata: {name: good-v4}
spec: {subnet: 10.90.0.0/24, ips: [10.90.0.10-10.90.0.20], default: true}
status:
  allocatedIPs: '{"10.90.0.10": {"pod": "default/gone", "podUid": "u-gone"}}'
---
apiVersion: spiderpool.spidernet.io/v2beta1
kind: SpiderIPPool
metadata: {name: overlap-v4}
spec: {subnet: 10.90.0.0/24, ips: [10.90.0.15-10.90.0.30]}
status:
  allocatedIPs: '{"10.90.0.25": {"pod": "default/gone", "podUid": "u-gone"}}'
---
apiVersion: spiderpool.spidernet.io/v2beta1
kind: SpiderIPPool
metadata: {name: typo-v4}
spec: {subnet: 10.91.0.0/33, ips: [10.91.0.10-10.91.0.20]}
---
apiVersion: v1
kind: Pod
metadata:
  name: a
  namespace: default
  uid: u-a
  annotations: {ipam.spidernet.io/ippool: '{"ipv4": ["typo-v4"]}'}
spec: {nodeName: n1}
---
apiVersion: v1
kind: Pod
metadata:
  name: b
  namespace: default
  uid: u-b
  annotations: {ipam.spidernet.io/ippool: '{"ipv4": ["overlap-v4", "good-v4"]}'}
spec: {nodeName: n1}
`

// TestOverlapInEveryCommand: every command checks the pools against each
// other, reports overlapping ones and exits 1.
func TestOverlapInEveryCommand(t *testing.T) {
	path := writeTemp(t, "overlap.yaml", overlapping)
	for _, cmd := range []string{"validate", "explain", "gc"} {
		stdout, stderr, code := runCmd(t, cmd, "-f", path)
		require.Equalf(t, exitProblem, code, "%s:\n%s\n%s", cmd, stdout, stderr)
		require.Containsf(t, stdout+stderr, `:8: document 2 (SpiderIPPool overlap-v4): spec.ips "10.90.0.15-10.90.0.20": overlaps the addresses of pool "good-v4"`, "%s", cmd)
	}
	// gc judges the claims of the pools it keeps only.
	stdout, _, _ := runCmd(t, "gc", "-f", path, "--now", "2025-03-01T12:00:00Z", "-o", "json")
	var out jsonGC
	require.NoError(t, json.Unmarshal([]byte(stdout), &out))
	require.Len(t, out.Claims, 1)
	require.Equal(t, "good-v4", out.Claims[0].Pool)
}

// TestLeftOutPool: a pod that names a pool ipamctl left out (invalid, or
// overlapping a pool read before it) is told why the pool was left out, not
// that there is no such pool.
func TestLeftOutPool(t *testing.T) {
	path := writeTemp(t, "leftout.yaml", overlapping)
	stdout, _, code := runCmd(t, "explain", "-f", path, "-o", "json")
	require.Equal(t, exitProblem, code)
	require.NotContains(t, stdout, "no such pool")
	out := jsonOutput(t, stdout)
	a := findPod(t, out, "default/a").Interfaces[0]
	require.Equal(t, `eth0 IPv4: pool "typo-v4" was left out: spec.subnet "10.91.0.0/33": invalid CIDR address (`+path+`:15); named by pod annotation ipam.spidernet.io/ippool`, a.Error)
	require.Equal(t, `pool "typo-v4" was left out: spec.subnet "10.91.0.0/33": invalid CIDR address (`+path+`:15)`, a.Trace[0].Message)
	b := findPod(t, out, "default/b").Interfaces[0]
	require.Contains(t, b.Error, `pool "overlap-v4" was left out: spec.ips "10.90.0.15-10.90.0.20": overlaps the addresses of pool "good-v4"; the pool is left out (`+path+`:8)`)

	for _, msg := range []string{a.Error, b.Error} {
		require.Equalf(t, strings.Count(msg, "("), strings.Count(msg, ")"), "unbalanced parentheses: %s", msg) // issue 26, case 10
	}

	table, _, _ := runCmd(t, "explain", "-f", path)
	require.Contains(t, table, `not-found: pool "typo-v4" was left out: spec.subnet`)
	require.NotContains(t, table, "no such pool")
}

// TestExplainAllIsLazy: explain allocates a pod only when the one before it
// has been handed on (and written out), so no report waits for the others.
func TestExplainAllIsLazy(t *testing.T) {
	ctx := context.Background()
	c := (&input{files: files{"testdata/cluster.yaml"}, maxInput: defaultMaxInput}).load()
	c.dropOverlaps()
	e, err := newExplainer(ctx, c, ipam.NetConf{}, fixedClock())
	require.NoError(t, err)
	before, err := e.alloc.Claims(ctx)
	require.NoError(t, err)
	seen := 0
	require.NoError(t, e.explainAll(ctx, func(r *podReport) (bool, error) {
		seen++
		return r.skipped != "" || len(r.interfaces) == 0 || len(r.interfaces[0].ips) == 0, nil
	}))
	after, err := e.alloc.Claims(ctx)
	require.NoError(t, err)
	require.Less(t, seen, len(c.pods), "the scenario's first served pod is not its last")
	require.Greater(t, len(after), len(before))
	require.LessOrEqual(t, len(after)-len(before), 2, "only the pods up to the first served one were allocated")
}
