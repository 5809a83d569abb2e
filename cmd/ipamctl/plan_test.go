package main

import (
	"bytes"
	"encoding/json"
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
