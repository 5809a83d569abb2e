package ipam_test

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/ipamkit/ipam"
)

// sortFields are the selection fields that rank a pool, in Spiderpool's
// order of importance, with a JSON value for each.
var sortFields = []struct{ name, value string }{
	{"podAffinity", `{"matchLabels":{"app":"web"}}`},
	{"nodeName", `["node1"]`},
	{"nodeAffinity", `{"matchLabels":{"zone":"a"}}`},
	{"namespaceName", `["ns1"]`},
	{"namespaceAffinity", `{"matchLabels":{"team":"x"}}`},
	{"multusName", `["kube-system/macvlan"]`},
}

// sortPool builds a pool that sets the named selection fields.
func sortPool(name string, fields ...string) *ipam.Pool {
	doc := `{"name":"` + name + `","subnet":"10.0.0.0/24","ips":["10.0.0.10"]`
	for _, f := range sortFields {
		if slices.Contains(fields, f.name) {
			doc += `,"` + f.name + `":` + f.value
		}
	}
	for _, f := range fields {
		if !slices.ContainsFunc(sortFields, func(sf struct{ name, value string }) bool { return sf.name == f }) {
			panic("unknown field " + f)
		}
	}
	return ipam.MustParsePool(doc + "}")
}

func sortNames(pools []*ipam.Pool) []string {
	out := make([]string, len(pools))
	for i, p := range pools {
		out[i] = p.Name
	}
	return out
}

// sortEveryOrder sorts every permutation of pools and requires want each
// time: for pools of distinct ranks the input order must not matter.
func sortEveryOrder(t *testing.T, pools []*ipam.Pool, want []string) {
	t.Helper()
	var permute func(k int)
	permute = func(k int) {
		if k == len(pools) {
			in := slices.Clone(pools)
			ipam.Sort(in)
			if diff := cmp.Diff(want, sortNames(in)); diff != "" {
				t.Fatalf("Sort(%v) (-want +got):\n%s", sortNames(pools), diff)
			}
			return
		}
		for i := k; i < len(pools); i++ {
			pools[k], pools[i] = pools[i], pools[k]
			permute(k + 1)
			pools[k], pools[i] = pools[i], pools[k]
		}
	}
	permute(0)
}

// TestSortWorkedExamples runs the examples of facts §1.5, verified against
// Spiderpool's sortPoolCandidates.
func TestSortWorkedExamples(t *testing.T) {
	t.Run("pod, nodeName, nsName, multus, none", func(t *testing.T) {
		sortEveryOrder(t, []*ipam.Pool{
			sortPool("pool1", "podAffinity"),
			sortPool("pool2", "nodeName"),
			sortPool("pool3", "namespaceName"),
			sortPool("pool4", "multusName"),
			sortPool("pool5"),
		}, []string{"pool1", "pool2", "pool3", "pool4", "pool5"})
	})
	t.Run("pod, nodeName, nodeName+nsName, nsName+multus", func(t *testing.T) {
		sortEveryOrder(t, []*ipam.Pool{
			sortPool("pool1", "podAffinity"),
			sortPool("pool2", "nodeName"),
			sortPool("pool3", "nodeName", "namespaceName"),
			sortPool("pool4", "namespaceName", "multusName"),
		}, []string{"pool1", "pool3", "pool2", "pool4"})
	})
	t.Run("nodeName, nodeAffinity, nsName, none", func(t *testing.T) {
		sortEveryOrder(t, []*ipam.Pool{
			sortPool("nn", "nodeName"),
			sortPool("na", "nodeAffinity"),
			sortPool("nsn", "namespaceName"),
			sortPool("plain"),
		}, []string{"nn", "na", "nsn", "plain"})
	})
}

// TestSortDocumentedExamples runs the three instances of the sort rule in
// Spiderpool's IP allocation document: in each, pool A goes first.
func TestSortDocumentedExamples(t *testing.T) {
	tests := []struct {
		name string
		a, b *ipam.Pool
	}{
		{"podAffinity+nodeName before podAffinity",
			sortPool("A", "podAffinity", "nodeName"), sortPool("B", "podAffinity")},
		{"podAffinity before nodeName+namespaceName",
			sortPool("A", "podAffinity"), sortPool("B", "nodeName", "namespaceName")},
		{"podAffinity+nodeName before podAffinity+namespaceName+multusName",
			sortPool("A", "podAffinity", "nodeName"), sortPool("B", "podAffinity", "namespaceName", "multusName")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Negative(t, ipam.ComparePriority(tt.a, tt.b))
			require.Positive(t, ipam.ComparePriority(tt.b, tt.a))
			sortEveryOrder(t, []*ipam.Pool{tt.a, tt.b}, []string{"A", "B"})
		})
	}
}

// TestSortScenarios reads the sort scenarios SP-23 and SP-25 from the
// conformance data and checks the order they record, whatever the input
// order; and SP-26 (ties), where we keep the written order by design.
func TestSortScenarios(t *testing.T) {
	data, err := os.ReadFile("testdata/conformance/spiderpool-scenarios.json")
	require.NoError(t, err)
	var doc struct {
		Scenarios []struct {
			ID    string `json:"id"`
			Setup struct {
				Pools map[string]map[string]any `json:"pools"`
			} `json:"setup"`
			Expect struct {
				Order json.RawMessage `json:"order"`
			} `json:"expect"`
		} `json:"scenarios"`
	}
	require.NoError(t, json.Unmarshal(data, &doc))
	seen := map[string]bool{}
	for _, sc := range doc.Scenarios {
		if sc.ID != "SP-23" && sc.ID != "SP-25" {
			continue
		}
		seen[sc.ID] = true
		t.Run(sc.ID, func(t *testing.T) {
			var want []string
			require.NoError(t, json.Unmarshal(sc.Expect.Order, &want))
			var pools []*ipam.Pool
			for name, fields := range sc.Setup.Pools {
				var set []string
				for f, v := range fields {
					require.Equal(t, true, v, "scenario %s pool %s field %s", sc.ID, name, f)
					set = append(set, f)
				}
				pools = append(pools, sortPool(name, set...))
			}
			require.Len(t, pools, len(want))
			sortEveryOrder(t, pools, want)
		})
	}
	require.Equal(t, map[string]bool{"SP-23": true, "SP-25": true}, seen)
}

// TestSortTiesKeepWrittenOrder is SP-26 with our deliberate difference: pools
// of equal rank keep the order they were named in.
func TestSortTiesKeepWrittenOrder(t *testing.T) {
	pools := []*ipam.Pool{sortPool("a"), sortPool("b"), sortPool("c"), sortPool("d")}
	for range 20 {
		in := slices.Clone(pools)
		ipam.Sort(in)
		require.Equal(t, []string{"a", "b", "c", "d"}, sortNames(in))
	}
	mixed := []*ipam.Pool{
		sortPool("x", "multusName"),
		sortPool("y", "nodeName"),
		sortPool("z", "multusName"),
		sortPool("w", "nodeName"),
		sortPool("v"),
		sortPool("u", "nodeName"),
	}
	ipam.Sort(mixed)
	require.Equal(t, []string{"y", "w", "u", "x", "z", "v"}, sortNames(mixed))
}

func TestRank(t *testing.T) {
	require.Zero(t, ipam.Rank(nil))
	require.Zero(t, ipam.Rank(sortPool("none")))
	all := make([]string, len(sortFields))
	for i, f := range sortFields {
		all[i] = f.name
	}
	require.Equal(t, uint8(63), ipam.Rank(sortPool("all", all...)))
	// Each field outranks every combination of the fields after it.
	for i, f := range sortFields {
		require.Greater(t, ipam.Rank(sortPool("one", f.name)), ipam.Rank(sortPool("rest", all[i+1:]...)), f.name)
	}
	// nodeAffinity beside nodeName counts for the rank, although the
	// filters ignore it.
	require.Negative(t, ipam.ComparePriority(sortPool("a", "nodeName", "nodeAffinity"), sortPool("b", "nodeName")))
	require.Zero(t, ipam.ComparePriority(sortPool("a", "namespaceName"), sortPool("b", "namespaceName")))
}

// sortNaiveCompare is Spiderpool's comparison written out: the first field,
// in order, that one pool has and the other has not decides.
func sortNaiveCompare(a, b []bool) int {
	for i := range a {
		switch {
		case a[i] && !b[i]:
			return -1
		case !a[i] && b[i]:
			return 1
		}
	}
	return 0
}

// TestSortProperty sorts random pools and checks the result against the
// naive comparison: ordered, a permutation of the input, and stable.
func TestSortProperty(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("seed %d", seed)
		}
	})
	rng := rand.New(rand.NewPCG(seed, seed>>1))

	// One pool per combination of fields, with the combination as booleans.
	type combo struct {
		pool *ipam.Pool
		has  []bool
	}
	var combos []combo
	for mask := range 1 << len(sortFields) {
		var fields []string
		has := make([]bool, len(sortFields))
		for i, f := range sortFields {
			if mask&(1<<i) != 0 {
				fields = append(fields, f.name)
				has[i] = true
			}
		}
		combos = append(combos, combo{sortPool("c", fields...), has})
	}
	for _, x := range combos {
		for _, y := range combos {
			require.Equal(t, sortNaiveCompare(x.has, y.has), ipam.ComparePriority(x.pool, y.pool),
				"ComparePriority(%v, %v)", x.has, y.has)
		}
	}

	for range 500 {
		n := rng.IntN(24)
		in := make([]*ipam.Pool, n)
		has := make(map[*ipam.Pool][]bool, n)
		pos := make(map[*ipam.Pool]int, n)
		for i := range in {
			c := combos[rng.IntN(len(combos))]
			if rng.IntN(3) == 0 { // make ties likely
				c = combos[rng.IntN(4)]
			}
			// A distinct pointer per position, so that stability is visible.
			p := *c.pool
			in[i] = &p
			has[&p], pos[&p] = c.has, i
		}
		out := slices.Clone(in)
		ipam.Sort(out)
		require.ElementsMatch(t, in, out)
		for i := 1; i < len(out); i++ {
			c := sortNaiveCompare(has[out[i-1]], has[out[i]])
			require.LessOrEqual(t, c, 0, "out of order at %d", i)
			if c == 0 {
				require.Less(t, pos[out[i-1]], pos[out[i]], "ties reordered at %d", i)
			}
		}
	}
}

func TestSortDoesNotAllocate(t *testing.T) {
	var src []*ipam.Pool
	for i, f := range sortFields {
		src = append(src, sortPool("p", sortFields[len(sortFields)-1-i].name), sortPool("q"), sortPool("r", f.name))
	}
	dst := make([]*ipam.Pool, len(src))
	allocs := testing.AllocsPerRun(100, func() {
		copy(dst, src)
		ipam.Sort(dst)
	})
	require.Zero(t, allocs)
}
