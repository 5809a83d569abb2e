package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/ from the current output")

// fixedClock is the time of every run in the tests.
func fixedClock() time.Time { return time.Date(2025, time.March, 1, 12, 0, 0, 0, time.UTC) }

// runCmd runs ipamctl with args and returns its stdout, stderr and exit code.
func runCmd(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return runStdin(t, strings.NewReader(""), args...)
}

// runStdin is runCmd with stdin as standard input.
func runStdin(t *testing.T, stdin io.Reader, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(context.Background(), args, stdin, &out, &errOut, fixedClock)
	return out.String(), errOut.String(), code
}

// transcript is what a golden file holds: the command, its stdout, its
// stderr if any, and its exit code.
func transcript(args []string, stdout, stderr string, code int) string {
	var b strings.Builder
	b.WriteString("$ ipamctl " + strings.Join(args, " ") + "\n")
	b.WriteString(stdout)
	if stderr != "" {
		b.WriteString("--- stderr\n")
		b.WriteString(stderr)
	}
	b.WriteString("--- exit " + strconv.Itoa(code) + "\n")
	return b.String()
}

// checkGolden compares got with the golden file, or rewrites it with -update.
func checkGolden(t *testing.T, golden, got string) {
	t.Helper()
	path := filepath.Join("testdata", golden)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./cmd/ipamctl -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s (run with -update if the change is intended)\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

// TestGolden runs each command on the scenario files and compares the whole
// transcript with its golden file. Regenerate with
// go test ./cmd/ipamctl -update, and review the diff.
func TestGolden(t *testing.T) {
	tests := []struct {
		golden string
		args   []string
	}{
		// Every affinity kind, reserved IPs, a namespace default, a
		// multi-NIC pod, pods no pool can serve, a StatefulSet pod that
		// gets its address back, a host-network pod.
		{"explain.golden", []string{"explain", "-f", "testdata/cluster.yaml"}},
		{"explain.json.golden", []string{"explain", "-f", "testdata/cluster.yaml", "-o", "json"}},
		// The CNI config's default pools, for one pod (the pods before it
		// are allocated first, so the addresses are the same as above).
		{"explain-cni.golden", []string{"explain", "-f", "testdata/cluster.yaml", "--cni-config", "testdata/spiderpool.conflist", "--pod", "default/web-1"}},
		{"explain-kubectl-list.golden", []string{"explain", "-f", "testdata/kubectl-list.yaml"}},
		// Bad input: every problem named by file, document and field; the
		// rest is still used.
		{"explain-bad.golden", []string{"explain", "-f", "testdata/bad.yaml", "-f", "testdata/missing.yaml"}},
		{"validate.golden", []string{"validate", "-f", "testdata/cluster.yaml"}},
		{"validate-bad.golden", []string{"validate", "-f", "testdata/bad.yaml"}},
		{"gc.golden", []string{"gc", "-f", "testdata/gc.yaml", "--now", "2025-03-01T12:00:00Z"}},
		{"gc.json.golden", []string{"gc", "-f", "testdata/gc.yaml", "--now", "2025-03-01T12:00:00Z", "-o", "json"}},
		// SpiderSubnet: a List with three subnets, a pool written by
		// hand, auto-pools to grow, delete and keep, and applications of
		// every native kind (a Deployment's ReplicaSet and a CronJob's Job
		// are not applications of their own; a host-network DaemonSet gets
		// no pool).
		{"plan.golden", []string{"plan", "-f", "testdata/subnets.yaml"}},
		{"plan.json.golden", []string{"plan", "-f", "testdata/subnets.yaml", "-o", "json"}},
		// Bad input: a malformed ippool-ip-number, an unknown subnet, two
		// interfaces on one subnet, a subnet too small, and more; those
		// applications get no pool, the others do.
		{"plan-bad.golden", []string{"plan", "-f", "testdata/plan-bad.yaml"}},
		{"plan-bad.json.golden", []string{"plan", "-f", "testdata/plan-bad.yaml", "-o", "json"}},
		{"validate-plan-bad.golden", []string{"validate", "-f", "testdata/plan-bad.yaml"}},
		// An auto-created pool serves only its application's pods: the
		// pod's application is found through its ReplicaSet.
		{"explain-subnets.golden", []string{"explain", "-f", "testdata/subnets.yaml"}},
	}
	for _, tt := range tests {
		t.Run(strings.TrimSuffix(tt.golden, ".golden"), func(t *testing.T) {
			stdout, stderr, code := runCmd(t, tt.args...)
			checkGolden(t, tt.golden, transcript(tt.args, stdout, stderr, code))
		})
	}
}

// TestValidateScenarios checks that every scenario file, bad.yaml aside,
// is valid on its own.
func TestValidateScenarios(t *testing.T) {
	for _, f := range []string{"cluster.yaml", "gc.yaml", "kubectl-list.yaml", "subnets.yaml"} {
		stdout, stderr, code := runCmd(t, "validate", "-f", filepath.Join("testdata", f))
		if code != exitOK || !strings.HasPrefix(stdout, "ok: ") || stderr != "" {
			t.Errorf("validate %s: exit %d\n%s%s", f, code, stdout, stderr)
		}
	}
}

// jsonOutput decodes explain -o json, refusing fields the schema in
// README.md does not document.
func jsonOutput(t *testing.T, stdout string) jsonExplain {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(stdout))
	dec.DisallowUnknownFields()
	var out jsonExplain
	if err := dec.Decode(&out); err != nil {
		t.Fatalf("decoding the JSON output: %v\n%s", err, stdout)
	}
	return out
}

func findPod(t *testing.T, out jsonExplain, name string) jsonPod {
	t.Helper()
	for _, p := range out.Pods {
		if p.Pod == name {
			return p
		}
	}
	t.Fatalf("pod %s not in the output", name)
	return jsonPod{}
}

// TestKubectlList feeds a List shaped exactly as `kubectl get
// sp,ns,nodes,pods -o yaml` prints it (apiVersion v1, kind List last, items
// with managedFields, resourceVersion, creationTimestamp, finalizers and
// status blocks), then the same as `-o json` prints it.
func TestKubectlList(t *testing.T) {
	yamlData, err := os.ReadFile("testdata/kubectl-list.yaml")
	if err != nil {
		t.Fatal(err)
	}
	jsonData, err := yaml.YAMLToJSON(yamlData)
	if err != nil {
		t.Fatal(err)
	}
	var indented bytes.Buffer
	if err := json.Indent(&indented, jsonData, "", "    "); err != nil {
		t.Fatal(err)
	}
	jsonFile := filepath.Join(t.TempDir(), "list.json")
	if err := os.WriteFile(jsonFile, indented.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}

	c := (&input{files: files{"testdata/kubectl-list.yaml"}, maxInput: defaultMaxInput}).load()
	if len(c.problems) != 0 {
		t.Fatalf("problems reading the List: %v", c.problems)
	}
	if len(c.pools) != 3 || len(c.namespaces) != 3 || len(c.nodes) != 2 || len(c.pods) != 3 {
		t.Fatalf("read %d pools, %d namespaces, %d nodes, %d pods; want 3, 3, 2, 3", len(c.pools), len(c.namespaces), len(c.nodes), len(c.pods))
	}
	if got := c.pods[1].at.String(); got != "testdata/kubectl-list.yaml:429: document 1, items[9] (Pod default/web-0)" {
		t.Errorf("origin of web-0 = %q", got)
	}

	var outputs []string
	for _, file := range []string{"testdata/kubectl-list.yaml", jsonFile} {
		stdout, stderr, code := runCmd(t, "explain", "-f", file, "-o", "json")
		if code != 0 || stderr != "" {
			t.Fatalf("%s: exit %d, stderr:\n%s", file, code, stderr)
		}
		outputs = append(outputs, stdout)
		out := jsonOutput(t, stdout)

		// A Running dual-stack pod gets back both addresses it holds.
		dns := findPod(t, out, "kube-system/coredns-5d78c9869d-8xk2v")
		if ips := dns.Interfaces[0].IPs; len(ips) != 2 || ips[0].Address != "172.18.40.10/24" || !ips[0].Reused ||
			ips[1].Address != "fc00:f853:ccd:e793::10/64" || !ips[1].Reused {
			t.Errorf("coredns got %+v, want its held 172.18.40.10/24 and fc00:f853:ccd:e793::10/64", ips)
		}
		// A recreated StatefulSet pod (new UID) gets its name's address.
		web := findPod(t, out, "default/web-0")
		if ips := web.Interfaces[0].IPs; len(ips) == 0 || ips[0].Address != "172.18.40.11/24" || !ips[0].Reused {
			t.Errorf("web-0 got %+v, want its held 172.18.40.11/24", ips)
		}
		// The namespace default names a pool whose node affinity excludes
		// the pod's node.
		edge := findPod(t, out, "edge/edge-proxy-7c9f8d6b5-q2w9x")
		eth0 := edge.Interfaces[0]
		if eth0.Error == "" || len(eth0.IPs) != 0 {
			t.Errorf("edge-proxy: got %+v, want an error", eth0)
		}
		if len(eth0.Trace) != 1 || eth0.Trace[0].Pool != "zone-a-v4" || eth0.Trace[0].Status != "filtered" ||
			eth0.Trace[0].Reason != "node-affinity" || eth0.Trace[0].Source != "namespace annotation" {
			t.Errorf("edge-proxy trace = %+v", eth0.Trace)
		}
	}
	if outputs[0] != outputs[1] {
		t.Errorf("the List as YAML and as JSON give different answers:\n%s\n---\n%s", outputs[0], outputs[1])
	}
}

// TestExplainJSON checks the JSON schema's promises on the main scenario.
func TestExplainJSON(t *testing.T) {
	stdout, _, code := runCmd(t, "explain", "-f", "testdata/cluster.yaml", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	out := jsonOutput(t, stdout)
	for _, p := range out.Pods {
		for _, ifc := range p.Interfaces {
			if ifc.IPs == nil || ifc.Trace == nil {
				t.Errorf("%s %s: ips and trace must be arrays, never null", p.Pod, ifc.Interface)
			}
			for _, e := range ifc.Trace {
				switch e.Status {
				case "served", "candidate":
					if e.Reason != "" || e.Rank < 1 {
						t.Errorf("%s %s: %+v: a served or candidate pool has a rank and no reason", p.Pod, ifc.Interface, e)
					}
				case "filtered":
					if e.Reason == "" || e.Rank != 0 {
						t.Errorf("%s %s: %+v: a filtered pool has a reason and no rank", p.Pod, ifc.Interface, e)
					}
				}
			}
		}
	}
	multi := findPod(t, out, "default/fileserver-0")
	if len(multi.Interfaces) != 2 || multi.Interfaces[1].Interface != "net1" || multi.Interfaces[1].IPs[0].Pool != "storage-v4" {
		t.Errorf("fileserver-0 interfaces = %+v, want eth0 and net1 from storage-v4", multi.Interfaces)
	}
	partial := findPod(t, out, "default/fileserver-1")
	for _, ifc := range partial.Interfaces {
		if ifc.Error == "" || len(ifc.IPs) != 0 {
			t.Errorf("fileserver-1 %s = %+v, want an error and no address (all or nothing)", ifc.Interface, ifc)
		}
	}
}

// TestPodFlag checks that --pod prints the pod as the full run does (the
// pods before it are allocated first), and that an unknown pod is an error.
func TestPodFlag(t *testing.T) {
	all, _, _ := runCmd(t, "explain", "-f", "testdata/cluster.yaml")
	one, stderr, code := runCmd(t, "explain", "-f", "testdata/cluster.yaml", "--pod", "team-a/api-0")
	if code != 0 || stderr != "" {
		t.Fatalf("exit %d, stderr %s", code, stderr)
	}
	if !strings.HasPrefix(one, "pod team-a/api-0 ") || !strings.Contains(all, one) {
		t.Errorf("--pod output is not the pod's block of the full output:\n%s", one)
	}
	_, stderr, code = runCmd(t, "explain", "-f", "testdata/cluster.yaml", "--pod", "nope")
	if code != exitProblem || !strings.Contains(stderr, "default/nope: no such pod") {
		t.Errorf("unknown --pod: exit %d, stderr %q", code, stderr)
	}
}

// TestUsage checks the exit codes and messages of command-line mistakes.
func TestUsage(t *testing.T) {
	tests := []struct {
		args []string
		code int
		want string
	}{
		{nil, exitUsage, "usage: ipamctl"},
		{[]string{"frobnicate"}, exitUsage, `unknown command "frobnicate"`},
		{[]string{"explain"}, exitUsage, "name at least one file with -f"},
		{[]string{"explain", "-f", "testdata/cluster.yaml", "-o", "yaml"}, exitUsage, `"yaml": want table or json`},
		{[]string{"explain", "-f", "testdata/cluster.yaml", "extra"}, exitUsage, "unexpected arguments"},
		{[]string{"gc", "-f", "testdata/gc.yaml", "--now", "noon"}, exitUsage, "want an RFC 3339 time"},
		{[]string{"explain", "-f", "testdata/cluster.yaml", "--cni-config", "testdata/cluster.yaml"}, exitProblem, "--cni-config"},
		{[]string{"validate", "-h"}, exitOK, "-f file"},
		{[]string{"kube"}, exitUsage, "usage: ipamctl kube migrate"},
		{[]string{"kube", "migrate", "-f", "testdata/cluster.yaml"}, exitUsage, "needs a cluster"},
	}
	for _, tt := range tests {
		_, stderr, code := runCmd(t, tt.args...)
		if code != tt.code || !strings.Contains(stderr, tt.want) {
			t.Errorf("ipamctl %q: exit %d, stderr %q; want exit %d and %q", tt.args, code, stderr, tt.code, tt.want)
		}
	}
}

// TestNetConf checks the CNI config forms read by --cni-config.
func TestNetConf(t *testing.T) {
	tests := []struct {
		name, conf, want, err string
	}{
		{"single config", `{"name":"n","type":"macvlan","ipam":{"type":"spiderpool","default_ipv4_ippool":["a","b"],"clean_gateway":true}}`, "[a b] [] true", ""},
		{"config list", `{"name":"n","plugins":[{"type":"macvlan","ipam":{"type":"spiderpool","default_ipv6_ippool":["v6"]}},{"type":"tuning"}]}`, "[] [v6] false", ""},
		{"no ipam", `{"name":"n","plugins":[{"type":"bridge"}]}`, "", "no ipam section"},
		{"wrong type", `{"ipam":{"default_ipv4_ippool":"a"}}`, "", "ipam.default_ipv4_ippool"},
		{"wrong type in a list", `{"plugins":[{"ipam":{"clean_gateway":"yes"}}]}`, "", "plugins[0].ipam.clean_gateway"},
		{"not JSON", `name: n`, "", "x.conf"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nc, err := loadNetConf("x.conf", []byte(tt.conf))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want one mentioning %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := strings.Join([]string{listString(nc.DefaultIPv4Pools), listString(nc.DefaultIPv6Pools), boolString(nc.CleanGateway)}, " ")
			if got != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
		})
	}
}

func listString(s []string) string { return "[" + strings.Join(s, " ") + "]" }

func boolString(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

// TestSplitYAML checks document boundaries and line numbers.
func TestSplitYAML(t *testing.T) {
	in := "# comment only\n---\na: 1\n---\n\n# nothing\n--- {b: 2}\n---\nc: [\n---\r\nd: 4\r\n"
	docs := splitYAML([]byte(in))
	var got []string
	for _, d := range docs {
		if d.err != "" {
			got = append(got, strconv.Itoa(d.line)+" error")
			continue
		}
		got = append(got, strconv.Itoa(d.line)+" "+string(d.json))
	}
	want := []string{`3 {"a":1}`, `7 {"b":2}`, `9 error`, `11 {"d":4}`}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("got %q, want %q", got, want)
	}
	if len(docs) > 2 && !strings.Contains(docs[2].err, "line 9") {
		t.Errorf("error %q should name line 9 of the file", docs[2].err)
	}
}
