package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// planOutput decodes plan -o json, refusing fields the schema in README.md
// does not have.
func planOutput(t *testing.T, stdout string) jsonPlan {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(stdout))
	dec.DisallowUnknownFields()
	var out jsonPlan
	require.NoError(t, dec.Decode(&out), stdout)
	return out
}

// TestPlanJSONShape pins the JSON shape of plan: exactly the keys the
// README documents, lists never null.
func TestPlanJSONShape(t *testing.T) {
	stdout, _, _ := runCmd(t, "plan", "-f", "testdata/plan-bad.yaml", "-o", "json")
	var doc map[string][]map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &doc))
	keys := func(m map[string]any) []string {
		var ks []string
		for k := range m {
			ks = append(ks, k)
		}
		slices.Sort(ks)
		return ks
	}
	require.Equal(t, []string{"application", "ips", "labels", "name", "reason", "subnet"}, keys(doc["pools"][0]))
	require.Equal(t, []string{"allocatedIPCount", "name", "totalIPCount"}, keys(doc["subnets"][0]))
	require.Equal(t, []string{"message", "object"}, keys(doc["problems"][0]))

	stdout, _, code := runCmd(t, "plan", "-f", writeTemp(t, "empty.yaml", "# nothing\n"), "-o", "json")
	require.Equal(t, exitOK, code)
	require.JSONEq(t, `{"pools":[],"subnets":[],"problems":[]}`, stdout)
}

// TestPlanBadInput checks that each bad application is a problem naming the
// annotation or field and its value, and gets no pool, while the good ones
// get theirs.
func TestPlanBadInput(t *testing.T) {
	stdout, _, code := runCmd(t, "plan", "-f", "testdata/plan-bad.yaml", "-o", "json")
	require.Equal(t, exitProblem, code)
	out := planOutput(t, stdout)
	var pools []string
	for _, p := range out.Pools {
		pools = append(pools, p.Name)
	}
	require.Equal(t, []string{"auto4-web-eth0-a5bd3"}, pools, "only the good application gets a pool")
	want := map[string]string{
		"Deployment default/bad-number":     `annotation "ipam.spidernet.io/ippool-ip-number" "1+": invalid input`,
		"Deployment default/unknown-subnet": `annotation "ipam.spidernet.io/subnet" ` + "`" + `{"ipv4":["subnet-x"]}` + "`" + `: ipv4[0] "subnet-x": no SpiderSubnet of that name`,
		"Deployment default/two-interfaces": `[1].ipv4[0] "subnet-6": subnet used by two interfaces`,
		"Deployment default/too-big":        `a pool of 11 addresses cannot fit: the subnet has 10 in all (totalIPCount); lower ipam.spidernet.io/ippool-ip-number "11"`,
		"Deployment default/hungry":         `insufficient free addresses: 9 wanted, 7 left`,
		"SpiderSubnet subnet-typo":          `spec.ips[0] "10.9.0.10-10.9.0.300": invalid IP address`,
		"SpiderSubnet subnet-6-too":         `spec.subnet "10.6.168.0/24": overlaps subnet "subnet-6"`,
		"StatefulSet default/handmade":      `spec.replicas -1: negative`,
	}
	for obj, msg := range want {
		found := slices.ContainsFunc(out.Problems, func(p jsonPlanProblem) bool {
			return strings.Contains(p.Object, "("+obj+")") && strings.Contains(p.Message, msg)
		})
		require.Truef(t, found, "no problem for %s with %q in %+v", obj, msg, out.Problems)
	}
	require.Equal(t, []jsonPlanSubnet{{Name: "subnet-6", TotalIPCount: 10, AllocatedIPCount: 3}}, out.Subnets)
}

// TestPlanInputForms reads the List as YAML, as JSON, and from standard
// input, and gets the same plan.
func TestPlanInputForms(t *testing.T) {
	yamlData, err := os.ReadFile("testdata/subnets.yaml")
	require.NoError(t, err)
	jsonData, err := yaml.YAMLToJSON(yamlData)
	require.NoError(t, err)
	want, stderr, code := runCmd(t, "plan", "-f", "testdata/subnets.yaml", "-o", "json")
	require.Equal(t, exitOK, code, stderr)
	got, stderr, code := runCmd(t, "plan", "-f", writeTemp(t, "list.json", string(jsonData)), "-o", "json")
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, want, got)
	got, stderr, code = runStdin(t, bytes.NewReader(yamlData), "plan", "-f", "-", "-o", "json")
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, want, got)
	// The size limit applies.
	_, stderr, code = runStdin(t, bytes.NewReader(yamlData), "plan", "-f", "-", "-max-input", "1KiB")
	require.Equal(t, exitProblem, code)
	require.Contains(t, stderr, "stdin: cannot read: over the input size limit")
}

func TestPlanDefaultIPNumber(t *testing.T) {
	stdout, _, code := runCmd(t, "plan", "-f", "testdata/subnets.yaml", "-o", "json", "--default-ip-number", "+0")
	require.Equal(t, exitOK, code)
	out := planOutput(t, stdout)
	for _, p := range out.Pools {
		if p.Name == "auto4-web-eth0-a5bd3" {
			require.Equal(t, []string{"10.6.168.104-10.6.168.105"}, p.IPs)
			require.Contains(t, p.Reason, `create: 2 addresses for 2 pods and ipam.spidernet.io/ippool-ip-number "+0" (the default)`)
		}
	}
	_, stderr, code := runCmd(t, "plan", "-f", "testdata/subnets.yaml", "--default-ip-number", "lots")
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr, `--default-ip-number: auto-pool options: DefaultIPNumber "lots": invalid input`)
}

// planDoc is a SpiderSubnet and Deployments for the issue 26 plan tests.
func planDoc(docs ...string) string {
	return strings.Join(append([]string{`apiVersion: spiderpool.spidernet.io/v2beta1
kind: SpiderSubnet
metadata:
  name: subnet-6
spec:
  subnet: 10.6.0.0/16
  ips:
  - 10.6.168.101-10.6.168.110
---
apiVersion: spiderpool.spidernet.io/v2beta1
kind: SpiderSubnet
metadata:
  name: subnet-7
spec:
  subnet: 10.7.0.0/16
  ips:
  - 10.7.168.101-10.7.168.110
---
apiVersion: spiderpool.spidernet.io/v2beta1
kind: SpiderSubnet
metadata:
  name: big-6
spec:
  subnet: fd00::/64
  ips:
  - fd00::1-fd00::ffff:ffff
`}, docs...), "---\n")
}

func planDeployment(ns, name, uid string, replicas int, annotations string) string {
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata:
  namespace: %s
  name: %s
  uid: %s
spec:
  replicas: %d
  template:
    metadata:
      annotations:
%s`, ns, name, uid, replicas, annotations)
}

// TestPlanNameCollisions pins issue 26 cases 3 and 6 in plan: two
// applications "web" whose UIDs share five characters get two pools of
// two names (plan used to print two creates of one name and exit 0), and
// interfaces "net1" and "NET1" are a problem, with no pool.
func TestPlanNameCollisions(t *testing.T) {
	ann := "        ipam.spidernet.io/subnet: '{\"ipv4\":[\"subnet-6\"]}'\n        ipam.spidernet.io/ippool-ip-number: \"2\"\n"
	f := writeTemp(t, "web.yaml", planDoc(
		planDeployment("team-a", "web", "11111111-1111-4111-8111-abcde0000001", 1, ann),
		planDeployment("team-b", "web", "22222222-2222-4222-8222-abcde0000002", 1, ann)))
	stdout, stderr, code := runCmd(t, "plan", "-f", f, "-o", "json")
	require.Equal(t, exitOK, code, stderr)
	out := planOutput(t, stdout)
	require.Len(t, out.Pools, 2)
	require.Equal(t, "auto4-web-eth0-abcde", out.Pools[0].Name)
	require.Equal(t, "auto4-web-eth0-abcde0000002", out.Pools[1].Name)
	require.True(t, strings.HasPrefix(out.Pools[1].Reason, "create: "), out.Pools[1].Reason)

	f = writeTemp(t, "nics.yaml", planDoc(planDeployment("default", "nics", "33333333-3333-4333-8333-333333333333", 1,
		"        ipam.spidernet.io/subnets: '[{\"interface\":\"net1\",\"ipv4\":[\"subnet-6\"]},{\"interface\":\"NET1\",\"ipv4\":[\"subnet-7\"]}]'\n")))
	stdout, stderr, code = runCmd(t, "plan", "-f", f, "-o", "json")
	require.Equal(t, exitProblem, code, stderr)
	out = planOutput(t, stdout)
	require.Empty(t, out.Pools)
	found := slices.ContainsFunc(out.Problems, func(p jsonPlanProblem) bool {
		return strings.Contains(p.Message, `[0].interface "net1" and [1].interface "NET1" differ only in case`)
	})
	require.Truef(t, found, "no problem naming both interfaces in %+v", out.Problems)
}

// TestPlanHugePool pins issue 26 case 5 in plan: a pool of more than 2^26
// addresses that has exactly its size is kept (plan said "grow"); and case
// 10: a subnet whose total is beyond int64 says it is saturated.
func TestPlanHugePool(t *testing.T) {
	app := planDeployment("default", "big", "44444444-4444-4444-8444-444444444444", 100_000_000,
		"        ipam.spidernet.io/subnet: '{\"ipv6\":[\"big-6\"]}'\n        ipam.spidernet.io/ippool-ip-number: \"+0\"\n")
	stdout, stderr, code := runCmd(t, "plan", "-f", writeTemp(t, "big.yaml", planDoc(app)), "-o", "json")
	require.Equal(t, exitOK, code, stderr)
	out := planOutput(t, stdout)
	require.Len(t, out.Pools, 1)
	p := out.Pools[0]
	require.Equal(t, []string{"fd00::1-fd00::5f5:e100"}, p.IPs) // 100,000,000 addresses
	labels, err := yaml.Marshal(p.Labels)
	require.NoError(t, err)
	pool := fmt.Sprintf(`apiVersion: spiderpool.spidernet.io/v2beta1
kind: SpiderIPPool
metadata:
  name: %s
  annotations:
    ipam.spidernet.io/ippool-ip-number: "+0"
  labels:
%s
spec:
  subnet: fd00::/64
  ips:
  - %s
`, p.Name, "    "+strings.ReplaceAll(strings.TrimSpace(string(labels)), "\n", "\n    "), p.IPs[0])
	stdout, stderr, code = runCmd(t, "plan", "-f", writeTemp(t, "kept.yaml", planDoc(app, pool)), "-o", "json")
	require.Equal(t, exitOK, code, stderr)
	out = planOutput(t, stdout)
	require.Len(t, out.Pools, 1)
	require.True(t, strings.HasPrefix(out.Pools[0].Reason, "keep: "), out.Pools[0].Reason)
	require.Equal(t, p.IPs, out.Pools[0].IPs)

	wide := `apiVersion: spiderpool.spidernet.io/v2beta1
kind: SpiderSubnet
metadata:
  name: wide-6
spec:
  subnet: fd01::/56
  ips:
  - fd01::1-fd01:0:0:ff::1
`
	f := writeTemp(t, "wide.yaml", wide)
	stdout, stderr, code = runCmd(t, "plan", "-f", f, "-o", "json")
	require.Equal(t, exitOK, code, stderr)
	out = planOutput(t, stdout)
	require.Equal(t, []jsonPlanSubnet{{Name: "wide-6", TotalIPCount: math.MaxInt64, Saturated: true}}, out.Subnets)
	stdout, _, _ = runCmd(t, "plan", "-f", f)
	require.Contains(t, stdout, "wide-6  >=9223372036854775807  0          >=9223372036854775807")
}
