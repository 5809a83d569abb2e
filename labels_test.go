package ipam_test

import (
	"cmp"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/ipamkit/ipam"
)

var labelSeed = flag.Uint64("labelseed", 0, "seed for TestLabelSelectorDifferential; 0 picks one from the clock")

func TestLabelSelectorMatches(t *testing.T) {
	app := map[string]string{"app": "web", "tier": "front", "empty": ""}
	tests := []struct {
		name   string
		sel    *ipam.LabelSelector
		labels map[string]string
		want   bool
	}{
		{"nil selector", nil, app, false},
		{"nil selector nil labels", nil, nil, false},
		{"empty selector", &ipam.LabelSelector{}, app, true},
		{"empty selector nil labels", &ipam.LabelSelector{}, nil, true},
		{"empty non-nil fields", &ipam.LabelSelector{MatchLabels: map[string]string{}, MatchExpressions: []ipam.LabelSelectorRequirement{}}, nil, true},

		{"matchLabels equal", labelSel(labelMap("app", "web")), app, true},
		{"matchLabels other value", labelSel(labelMap("app", "db")), app, false},
		{"matchLabels missing key", labelSel(labelMap("zone", "a")), app, false},
		{"matchLabels nil labels", labelSel(labelMap("app", "web")), nil, false},
		{"matchLabels empty value present", labelSel(labelMap("empty", "")), app, true},
		{"matchLabels empty value absent key", labelSel(labelMap("zone", "")), app, false},
		{"matchLabels empty value non-empty label", labelSel(labelMap("app", "")), app, false},
		{"matchLabels all of two", labelSel(labelMap("app", "web", "tier", "front")), app, true},
		{"matchLabels one of two", labelSel(labelMap("app", "web", "tier", "back")), app, false},

		{"In hit", labelSel(nil, labelReq("app", ipam.In, "db", "web")), app, true},
		{"In miss", labelSel(nil, labelReq("app", ipam.In, "db")), app, false},
		{"In missing key", labelSel(nil, labelReq("zone", ipam.In, "a")), app, false},
		{"In missing key empty value", labelSel(nil, labelReq("zone", ipam.In, "")), app, false},
		{"In empty value", labelSel(nil, labelReq("empty", ipam.In, "", "x")), app, true},
		{"In no values is invalid", labelSel(nil, labelReq("app", ipam.In)), app, false},

		{"NotIn hit", labelSel(nil, labelReq("app", ipam.NotIn, "db")), app, true},
		{"NotIn miss", labelSel(nil, labelReq("app", ipam.NotIn, "db", "web")), app, false},
		{"NotIn missing key", labelSel(nil, labelReq("zone", ipam.NotIn, "a")), app, true},
		{"NotIn missing key nil labels", labelSel(nil, labelReq("zone", ipam.NotIn, "a")), nil, true},
		{"NotIn empty value", labelSel(nil, labelReq("empty", ipam.NotIn, "")), app, false},
		{"NotIn no values is invalid", labelSel(nil, labelReq("zone", ipam.NotIn)), app, false},

		{"Exists hit", labelSel(nil, labelReq("app", ipam.Exists)), app, true},
		{"Exists empty value", labelSel(nil, labelReq("empty", ipam.Exists)), app, true},
		{"Exists miss", labelSel(nil, labelReq("zone", ipam.Exists)), app, false},
		{"Exists with values is invalid", labelSel(nil, labelReq("app", ipam.Exists, "web")), app, false},

		{"DoesNotExist hit", labelSel(nil, labelReq("zone", ipam.DoesNotExist)), app, true},
		{"DoesNotExist nil labels", labelSel(nil, labelReq("zone", ipam.DoesNotExist)), nil, true},
		{"DoesNotExist miss", labelSel(nil, labelReq("app", ipam.DoesNotExist)), app, false},
		{"DoesNotExist empty value", labelSel(nil, labelReq("empty", ipam.DoesNotExist)), app, false},
		{"DoesNotExist with values is invalid", labelSel(nil, labelReq("zone", ipam.DoesNotExist, "x")), app, false},

		{"unknown operator Gt", labelSel(nil, labelReq("app", "Gt", "1")), app, false},
		{"unknown operator lower case", labelSel(nil, labelReq("app", "in", "web")), app, false},
		{"empty operator", labelSel(nil, labelReq("app", "")), app, false},
		{"invalid key", labelSel(nil, labelReq("a b", ipam.DoesNotExist)), app, false},
		{"invalid matchLabels key", labelSel(labelMap("-app", "web")), map[string]string{"-app": "web"}, false},
		{"invalid matchLabels value", labelSel(labelMap("app", "web!")), map[string]string{"app": "web!"}, false},
		{"invalid In value", labelSel(nil, labelReq("app", ipam.In, "web", "a b")), app, false},
		{"prefixed key", labelSel(nil, labelReq("example.com/app", ipam.In, "web")), map[string]string{"example.com/app": "web"}, true},

		{"labels and expressions all hold", labelSel(labelMap("app", "web"),
			labelReq("tier", ipam.In, "front", "back"),
			labelReq("zone", ipam.NotIn, "a"),
			labelReq("empty", ipam.Exists),
			labelReq("legacy", ipam.DoesNotExist)), app, true},
		{"labels hold expression fails", labelSel(labelMap("app", "web"), labelReq("tier", ipam.NotIn, "front")), app, false},
		{"expressions hold label fails", labelSel(labelMap("app", "db"), labelReq("tier", ipam.In, "front")), app, false},
		{"same key label and expression", labelSel(labelMap("app", "web"), labelReq("app", ipam.In, "web", "db")), app, true},
		{"contradicting expressions", labelSel(nil, labelReq("app", ipam.Exists), labelReq("app", ipam.DoesNotExist)), app, false},
		{"one invalid expression spoils the rest", labelSel(labelMap("app", "web"), labelReq("tier", ipam.In, "front"), labelReq("x", "Lt", "1")), app, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, tt.sel.Matches(tt.labels), "selector %q", tt.sel)
		})
	}
}

func TestLabelSelectorMatchesAllocs(t *testing.T) {
	s := labelSel(labelMap("app", "web", "example.com/team", "net"),
		labelReq("tier", ipam.In, "front", "back"),
		labelReq("zone", ipam.NotIn, "a", "b"),
		labelReq("app", ipam.Exists),
		labelReq("legacy", ipam.DoesNotExist))
	labels := map[string]string{"app": "web", "example.com/team": "net", "tier": "back", "zone": "c"}
	require.True(t, s.Matches(labels))
	allocs := testing.AllocsPerRun(100, func() {
		if !s.Matches(labels) {
			panic("no match")
		}
	})
	require.Zero(t, allocs)
}

func BenchmarkLabelSelectorMatches(b *testing.B) {
	s := labelSel(labelMap("app", "web"),
		labelReq("tier", ipam.In, "front", "back"),
		labelReq("zone", ipam.NotIn, "a", "b"),
		labelReq("legacy", ipam.DoesNotExist))
	labels := map[string]string{"app": "web", "tier": "back", "zone": "c", "owner": "net"}
	b.ReportAllocs()
	for b.Loop() {
		s.Matches(labels)
	}
}

func TestLabelSelectorValidateInvalid(t *testing.T) {
	long63 := strings.Repeat("a", 63)
	tests := []struct {
		name       string
		sel        *ipam.LabelSelector
		wantField  string
		wantValue  string
		wantReason string
	}{
		{"operator Gt", labelSel(nil, labelReq("app", "Gt", "1")),
			"podAffinity.matchExpressions[0].operator", "Gt", "not a valid selector operator"},
		{"operator Lt", labelSel(nil, labelReq("app", ipam.In, "x"), labelReq("app", "Lt", "1")),
			"podAffinity.matchExpressions[1].operator", "Lt", "not a valid selector operator"},
		{"operator lower case", labelSel(nil, labelReq("app", "in", "x")),
			"podAffinity.matchExpressions[0].operator", "in", "not a valid selector operator"},
		{"operator empty", labelSel(nil, labelReq("app", "")),
			"podAffinity.matchExpressions[0].operator", "", "must be specified"},
		{"In without values", labelSel(nil, labelReq("app", ipam.In)),
			"podAffinity.matchExpressions[0].values", "", "must be specified when operator is In"},
		{"NotIn with empty values", labelSel(nil, ipam.LabelSelectorRequirement{Key: "app", Operator: ipam.NotIn, Values: []string{}}),
			"podAffinity.matchExpressions[0].values", "", "must be specified when operator is NotIn"},
		{"Exists with values", labelSel(nil, labelReq("app", ipam.Exists, "web", "db")),
			"podAffinity.matchExpressions[0].values", "web,db", "may not be specified when operator is Exists"},
		{"DoesNotExist with values", labelSel(nil, labelReq("app", ipam.DoesNotExist, "web")),
			"podAffinity.matchExpressions[0].values", "web", "may not be specified when operator is DoesNotExist"},
		{"empty key", labelSel(nil, labelReq("", ipam.Exists)),
			"podAffinity.matchExpressions[0].key", "", "name part must be non-empty"},
		{"key with two slashes", labelSel(nil, labelReq("a/b/c", ipam.Exists)),
			"podAffinity.matchExpressions[0].key", "a/b/c", "with an optional DNS subdomain prefix"},
		{"key with empty prefix", labelSel(nil, labelReq("/app", ipam.Exists)),
			"podAffinity.matchExpressions[0].key", "/app", "prefix part must be non-empty"},
		{"key with empty name", labelSel(nil, labelReq("example.com/", ipam.Exists)),
			"podAffinity.matchExpressions[0].key", "example.com/", "name part must be non-empty"},
		{"key with upper case prefix", labelSel(nil, labelReq("Example.com/app", ipam.Exists)),
			"podAffinity.matchExpressions[0].key", "Example.com/app", "prefix part must be a lowercase RFC 1123 subdomain"},
		{"key with underscore in prefix", labelSel(nil, labelReq("my_domain.com/app", ipam.Exists)),
			"podAffinity.matchExpressions[0].key", "my_domain.com/app", "prefix part must be a lowercase RFC 1123 subdomain"},
		{"key with empty prefix label", labelSel(nil, labelReq("example..com/app", ipam.Exists)),
			"podAffinity.matchExpressions[0].key", "example..com/app", "prefix part must be a lowercase RFC 1123 subdomain"},
		{"key with long prefix", labelSel(nil, labelReq(strings.Repeat("a.", 127)+"/app", ipam.Exists)),
			"podAffinity.matchExpressions[0].key", strings.Repeat("a.", 127) + "/app", "prefix part must be no more than 253 characters"},
		{"key with long name", labelSel(nil, labelReq(long63+"a", ipam.Exists)),
			"podAffinity.matchExpressions[0].key", long63 + "a", "name part must be no more than 63 characters"},
		{"key starting with dash", labelSel(nil, labelReq("-app", ipam.Exists)),
			"podAffinity.matchExpressions[0].key", "-app", "name part must consist of alphanumeric characters"},
		{"key ending with dot", labelSel(nil, labelReq("app.", ipam.Exists)),
			"podAffinity.matchExpressions[0].key", "app.", "must start and end with an alphanumeric character"},
		{"key with space", labelSel(nil, labelReq("my app", ipam.Exists)),
			"podAffinity.matchExpressions[0].key", "my app", "name part must consist of"},
		{"In value with space", labelSel(nil, labelReq("app", ipam.In, "web", "my web")),
			"podAffinity.matchExpressions[0].values[1]", "my web", "a valid label must be an empty string or consist of"},
		{"NotIn value too long", labelSel(nil, labelReq("app", ipam.NotIn, long63+"a")),
			"podAffinity.matchExpressions[0].values[0]", long63 + "a", "must be no more than 63 characters"},
		{"matchLabels key", labelSel(labelMap("bad key", "web")),
			"podAffinity.matchLabels", "bad key", "name part must consist of"},
		{"matchLabels prefixed key", labelSel(labelMap("EXAMPLE/app", "web")),
			"podAffinity.matchLabels", "EXAMPLE/app", "prefix part must be a lowercase RFC 1123 subdomain"},
		{"matchLabels value", labelSel(labelMap("app", "-web")),
			"podAffinity.matchLabels[app]", "-web", "a valid label must be an empty string or consist of"},
		{"matchLabels value non-ASCII", labelSel(labelMap("app", "wéb")),
			"podAffinity.matchLabels[app]", "wéb", "a valid label must be an empty string or consist of"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.sel.Validate("podAffinity")
			require.Error(t, err)
			require.ErrorIs(t, err, ipam.ErrInvalid)
			require.Len(t, labelUnwrapAll(err), 1, "errors: %v", err)

			var fe *ipam.FieldError
			require.ErrorAs(t, err, &fe)
			want := &ipam.FieldError{Field: tt.wantField, Value: tt.wantValue, Reason: fe.Reason}
			if diff := gocmp.Diff(want, fe); diff != "" {
				t.Errorf("FieldError mismatch (-want +got):\n%s", diff)
			}
			require.Contains(t, fe.Reason, tt.wantReason)

			msg := err.Error()
			require.Contains(t, msg, tt.wantField)
			if tt.wantValue != "" {
				require.Contains(t, msg, strconv.Quote(tt.wantValue))
			}
			require.False(t, tt.sel.Matches(nil), "an invalid selector matches nothing")
		})
	}
}

func TestLabelSelectorValidateAllAtOnce(t *testing.T) {
	s := labelSel(labelMap("app", "-web", "ok", "fine"),
		labelReq("tier", ipam.In, "front"),
		labelReq("zone", "Gt", "1"),
		labelReq("", ipam.Exists, "x"))
	err := s.Validate("")
	require.ErrorIs(t, err, ipam.ErrInvalid)

	var got []string
	for _, e := range labelUnwrapAll(err) {
		var fe *ipam.FieldError
		require.ErrorAs(t, e, &fe)
		require.Empty(t, fe.Object)
		got = append(got, fe.Field+" "+fe.Value)
	}
	want := []string{
		"matchLabels[app] -web",
		"matchExpressions[1].operator Gt",
		"matchExpressions[2].key ",
		"matchExpressions[2].values x",
	}
	if diff := gocmp.Diff(want, got); diff != "" {
		t.Errorf("errors mismatch (-want +got):\n%s", diff)
	}
}

func TestLabelSelectorValidateValid(t *testing.T) {
	valid := []*ipam.LabelSelector{
		nil,
		{},
		labelSel(labelMap("app", "", "example.com/app", "v", "A_b.c-D", strings.Repeat("x", 63))),
		labelSel(labelMap(strings.Repeat("a", 63)+".b/"+strings.Repeat("n", 63), "1")),
		labelSel(nil,
			labelReq("app", ipam.In, ""),
			labelReq("k8s.io/app", ipam.NotIn, "a", "b"),
			labelReq("a-1.b-2/C_3", ipam.Exists),
			labelReq("x", ipam.DoesNotExist, []string{}...)),
	}
	for _, s := range valid {
		require.NoError(t, s.Validate("sel"), "selector %q", s)
	}
}

func TestParseLabelSelector(t *testing.T) {
	got, err := parseLabelSelectorString(`{
		"matchLabels": {"app": "web"},
		"matchExpressions": [
			{"key": "tier", "operator": "In", "values": ["front", "back"]},
			{"key": "legacy", "operator": "DoesNotExist", "unknown": 1}
		],
		"unknownField": {"nested": [1, 2]}
	}`)
	require.NoError(t, err)
	want := labelSel(labelMap("app", "web"),
		labelReq("tier", ipam.In, "front", "back"),
		labelReq("legacy", ipam.DoesNotExist))
	if diff := gocmp.Diff(want, got); diff != "" {
		t.Errorf("ParseLabelSelector mismatch (-want +got):\n%s", diff)
	}

	got, err = parseLabelSelectorString(`{}`)
	require.NoError(t, err)
	require.NotNil(t, got)
	require.True(t, got.Matches(nil), "{} matches everything")

	got, err = parseLabelSelectorString(`null`)
	require.NoError(t, err)
	require.Nil(t, got, "null is a nil selector")
	require.False(t, got.Matches(nil), "null matches nothing")
}

func TestParseLabelSelectorErrors(t *testing.T) {
	tests := []struct {
		in        string
		wantField string
		wantMsg   string
	}{
		{``, "labelSelector", "malformed JSON"},
		{`{`, "labelSelector", "malformed JSON"},
		{`{"matchLabels":{"a":"b"}} x`, "labelSelector", "malformed JSON"},
		{`{"matchLabels":{"a":"b"},}`, "labelSelector", "malformed JSON"},
		{`[]`, "labelSelector", "got JSON array, want object"},
		{`"app=web"`, "labelSelector", "got JSON string, want object"},
		{`{"matchLabels":["a"]}`, "matchLabels", "got JSON array, want object"},
		{`{"matchLabels":{"a":1}}`, "matchLabels", "got JSON number, want string"},
		{`{"matchExpressions":{"key":"a"}}`, "matchExpressions", "got JSON object, want array"},
		{`{"matchExpressions":[{"key":"a","operator":1}]}`, "matchExpressions.operator", "got JSON number, want string"},
		{`{"matchExpressions":[{"key":"a","operator":"In","values":"x"}]}`, "matchExpressions.values", "got JSON string, want array"},
		{`{"matchExpressions":[{"key":"a","operator":"Gt","values":["1"]}]}`, "matchExpressions[0].operator", `"Gt": not a valid selector operator`},
		{`{"matchExpressions":[{"key":"a","operator":"In"}]}`, "matchExpressions[0].values", "must be specified when operator is In"},
		{`{"matchExpressions":[{"operator":"Exists"}]}`, "matchExpressions[0].key", "name part must be non-empty"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			s, err := parseLabelSelectorString(tt.in)
			require.Error(t, err)
			require.Nil(t, s)
			require.ErrorIs(t, err, ipam.ErrInvalid)
			var fe *ipam.FieldError
			require.ErrorAs(t, err, &fe)
			require.Equal(t, tt.wantField, fe.Field)
			require.Contains(t, err.Error(), tt.wantMsg)
		})
	}
}

func TestLabelSelectorString(t *testing.T) {
	tests := []struct {
		sel  *ipam.LabelSelector
		want string
	}{
		{nil, ""},
		{&ipam.LabelSelector{}, ""},
		{labelSel(labelMap("app", "web")), "app=web"},
		{labelSel(labelMap("app", "")), "app="},
		{labelSel(labelMap("tier", "front", "app", "web")), "app=web,tier=front"},
		{labelSel(nil, labelReq("tier", ipam.In, "b", "a")), "tier in (a,b)"},
		{labelSel(nil, labelReq("tier", ipam.NotIn, "x")), "tier notin (x)"},
		{labelSel(nil, labelReq("tier", ipam.In, "", "a")), "tier in (,a)"},
		{labelSel(nil, labelReq("legacy", ipam.Exists)), "legacy"},
		{labelSel(nil, labelReq("legacy", ipam.DoesNotExist)), "!legacy"},
		{labelSel(labelMap("app", "web"),
			labelReq("tier", ipam.In, "b", "a"),
			labelReq("legacy", ipam.DoesNotExist),
			labelReq("example.com/zone", ipam.NotIn, "z")),
			"app=web,example.com/zone notin (z),!legacy,tier in (a,b)"},
		{labelSel(labelMap("app", "web"), labelReq("app", ipam.Exists)), "app=web,app"},
		{labelSel(nil, labelReq("b", ipam.Exists), labelReq("a", ipam.Exists), labelReq("b", ipam.DoesNotExist)), "a,b,!b"},
		{labelSel(nil, labelReq("app", "Gt", "1")), "app Gt (1)"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			require.Equal(t, tt.want, tt.sel.String())
		})
	}
}

func TestLabelSelectorIsEmpty(t *testing.T) {
	require.True(t, (*ipam.LabelSelector)(nil).IsEmpty())
	require.True(t, (&ipam.LabelSelector{}).IsEmpty())
	require.True(t, (&ipam.LabelSelector{MatchLabels: map[string]string{}}).IsEmpty())
	require.False(t, labelSel(labelMap("a", "b")).IsEmpty())
	require.False(t, labelSel(nil, labelReq("a", ipam.Exists)).IsEmpty())
}

func TestLabelSelectorJSONShape(t *testing.T) {
	s := labelSel(labelMap("app", "web"), labelReq("tier", ipam.In, "a"), labelReq("legacy", ipam.DoesNotExist))
	data, err := json.Marshal(s)
	require.NoError(t, err)
	require.JSONEq(t, `{
		"matchLabels": {"app": "web"},
		"matchExpressions": [
			{"key": "tier", "operator": "In", "values": ["a"]},
			{"key": "legacy", "operator": "DoesNotExist"}
		]
	}`, string(data))
	data, err = json.Marshal(&ipam.LabelSelector{})
	require.NoError(t, err)
	require.Equal(t, `{}`, string(data))
}

// TestLabelSelectorDifferential compares Matches, Validate and String with
// naiveLabelMatches, naiveLabelValid and naiveLabelString, a plain restatement of Kubernetes's
// LabelSelectorAsSelector, on random selectors and label sets over a tiny
// alphabet. Replay a failure with -args -labelseed=N.
func TestLabelSelectorDifferential(t *testing.T) {
	seed := *labelSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (replay with -args -labelseed=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed))

	const cases = 20000
	var matched, valid int
	for i := range cases {
		s := randomLabelSelector(rng)
		labels := randomLabelSet(rng)
		want := naiveLabelMatches(s, labels)
		if got := s.Matches(labels); got != want {
			t.Fatalf("case %d: selector %s\nlabels %v\nMatches = %v, want %v", i, labelJSON(s), labels, got, want)
		}
		wantValid := naiveLabelValid(s)
		if err := s.Validate("sel"); (err == nil) != wantValid {
			t.Fatalf("case %d: selector %s\nValidate = %v, want valid %v", i, labelJSON(s), err, wantValid)
		}
		if wantValid {
			if got, want := s.String(), naiveLabelString(s); got != want {
				t.Fatalf("case %d: selector %s\nString = %q, want %q", i, labelJSON(s), got, want)
			}
			valid++
		}
		if want {
			matched++
		}
	}
	t.Logf("%d cases: %d valid, %d matched", cases, valid, matched)
	// Guard the generator against drifting into trivial cases.
	require.Greater(t, matched, cases/20)
	require.Greater(t, valid, cases/2)
	require.Less(t, matched, cases*19/20)
}

var (
	labelDiffKeys    = []string{"a", "b", "c", "x.io/a"}
	labelDiffBadKeys = []string{"", "-a", "X.io/a", "a/b/c", "/a", "a b"}
	labelDiffValues  = []string{"", "1", "2"}
	labelDiffBadVals = []string{"-", "a b", "1."}
	labelDiffOps     = []ipam.SelectorOperator{ipam.In, ipam.NotIn, ipam.Exists, ipam.DoesNotExist}
	labelDiffBadOps  = []ipam.SelectorOperator{"Gt", "Lt", "in", "", "exists"}
)

func randomLabelSelector(rng *rand.Rand) *ipam.LabelSelector {
	if rng.IntN(20) == 0 {
		return nil
	}
	pickKey := func() string {
		if rng.IntN(40) == 0 {
			return labelDiffBadKeys[rng.IntN(len(labelDiffBadKeys))]
		}
		return labelDiffKeys[rng.IntN(len(labelDiffKeys))]
	}
	pickValue := func() string {
		if rng.IntN(60) == 0 {
			return labelDiffBadVals[rng.IntN(len(labelDiffBadVals))]
		}
		return labelDiffValues[rng.IntN(len(labelDiffValues))]
	}
	s := &ipam.LabelSelector{}
	switch n := rng.IntN(4); n {
	case 0: // nil map
	case 1:
		s.MatchLabels = map[string]string{}
	default:
		s.MatchLabels = map[string]string{}
		for range n - 1 {
			s.MatchLabels[pickKey()] = pickValue()
		}
	}
	for range rng.IntN(4) {
		r := ipam.LabelSelectorRequirement{Key: pickKey()}
		if rng.IntN(40) == 0 {
			r.Operator = labelDiffBadOps[rng.IntN(len(labelDiffBadOps))]
		} else {
			r.Operator = labelDiffOps[rng.IntN(len(labelDiffOps))]
		}
		n := 0
		switch r.Operator {
		case ipam.In, ipam.NotIn:
			n = 1 + rng.IntN(3)
			if rng.IntN(30) == 0 {
				n = 0
			}
		default:
			if rng.IntN(30) == 0 {
				n = 1
			}
		}
		for range n {
			r.Values = append(r.Values, pickValue())
		}
		s.MatchExpressions = append(s.MatchExpressions, r)
	}
	return s
}

func randomLabelSet(rng *rand.Rand) map[string]string {
	if rng.IntN(10) == 0 {
		return nil
	}
	labels := map[string]string{}
	for _, k := range labelDiffKeys {
		if rng.IntN(2) == 0 {
			labels[k] = labelDiffValues[rng.IntN(len(labelDiffValues))]
		}
	}
	return labels
}

// The reference: Kubernetes's validation regular expressions and
// LabelSelectorAsSelector, restated plainly.
var (
	naiveLabelNameRE      = regexp.MustCompile(`^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$`)
	naiveLabelSubdomainRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
)

func naiveLabelKeyValid(k string) bool {
	parts := strings.Split(k, "/")
	name := parts[0]
	switch len(parts) {
	case 1:
	case 2:
		if len(parts[0]) == 0 || len(parts[0]) > 253 || !naiveLabelSubdomainRE.MatchString(parts[0]) {
			return false
		}
		name = parts[1]
	default:
		return false
	}
	return len(name) <= 63 && naiveLabelNameRE.MatchString(name)
}

func naiveLabelValueValid(v string) bool {
	return v == "" || len(v) <= 63 && naiveLabelNameRE.MatchString(v)
}

type naiveLabelReq struct {
	key    string
	op     string // "=", "in", "notin", "exists", "!"
	values []string
}

// naiveLabelSelector returns the requirements of s in Kubernetes's order, whether s
// is valid, and whether it is the "everything" selector.
func naiveLabelSelector(s *ipam.LabelSelector) (reqs []naiveLabelReq, ok, everything bool) {
	if s == nil {
		return nil, true, false
	}
	if len(s.MatchLabels)+len(s.MatchExpressions) == 0 {
		return nil, true, true
	}
	ok = true
	keys := slices.Sorted(maps.Keys(s.MatchLabels))
	for _, k := range keys {
		v := s.MatchLabels[k]
		if !naiveLabelKeyValid(k) || !naiveLabelValueValid(v) {
			ok = false
		}
		reqs = append(reqs, naiveLabelReq{k, "=", []string{v}})
	}
	for _, e := range s.MatchExpressions {
		var op string
		switch e.Operator {
		case "In":
			op = "in"
		case "NotIn":
			op = "notin"
		case "Exists":
			op = "exists"
		case "DoesNotExist":
			op = "!"
		default:
			ok = false
		}
		switch op {
		case "in", "notin":
			if len(e.Values) == 0 {
				ok = false
			}
		default:
			if len(e.Values) != 0 {
				ok = false
			}
		}
		if !naiveLabelKeyValid(e.Key) {
			ok = false
		}
		for _, v := range e.Values {
			if !naiveLabelValueValid(v) {
				ok = false
			}
		}
		reqs = append(reqs, naiveLabelReq{e.Key, op, e.Values})
	}
	slices.SortStableFunc(reqs, func(a, b naiveLabelReq) int { return cmp.Compare(a.key, b.key) })
	return reqs, ok, false
}

func naiveLabelValid(s *ipam.LabelSelector) bool {
	_, ok, _ := naiveLabelSelector(s)
	return ok
}

func naiveLabelMatches(s *ipam.LabelSelector, labels map[string]string) bool {
	reqs, ok, everything := naiveLabelSelector(s)
	if everything {
		return true
	}
	if s == nil || !ok {
		return false
	}
	for _, r := range reqs {
		v, has := labels[r.key]
		in := false
		for _, want := range r.values {
			if v == want {
				in = true
			}
		}
		switch r.op {
		case "=", "in":
			if !has || !in {
				return false
			}
		case "notin":
			if has && in {
				return false
			}
		case "exists":
			if !has {
				return false
			}
		case "!":
			if has {
				return false
			}
		}
	}
	return true
}

func naiveLabelString(s *ipam.LabelSelector) string {
	reqs, _, _ := naiveLabelSelector(s)
	var terms []string
	for _, r := range reqs {
		vals := slices.Clone(r.values)
		slices.Sort(vals)
		switch r.op {
		case "=":
			terms = append(terms, r.key+"="+r.values[0])
		case "in", "notin":
			terms = append(terms, r.key+" "+r.op+" ("+strings.Join(vals, ",")+")")
		case "exists":
			terms = append(terms, r.key)
		case "!":
			terms = append(terms, "!"+r.key)
		}
	}
	return strings.Join(terms, ",")
}

// parseLabelSelectorText parses the output of String for a valid selector back
// into a LabelSelector. It knows only what String writes.
func parseLabelSelectorText(str string) (*ipam.LabelSelector, error) {
	s := &ipam.LabelSelector{}
	if str == "" {
		return s, nil
	}
	for str != "" {
		// Terms are separated by commas outside parentheses.
		end, depth := len(str), 0
		for i, c := range str {
			if c == '(' {
				depth++
			} else if c == ')' {
				depth--
			} else if c == ',' && depth == 0 {
				end = i
				break
			}
		}
		term := str[:end]
		str = strings.TrimPrefix(str[end:], ",")

		if key, ok := strings.CutPrefix(term, "!"); ok {
			s.MatchExpressions = append(s.MatchExpressions, labelReq(key, ipam.DoesNotExist))
			continue
		}
		if key, rest, ok := strings.Cut(term, " "); ok {
			var op ipam.SelectorOperator
			switch {
			case strings.HasPrefix(rest, "in ("):
				op, rest = ipam.In, strings.TrimPrefix(rest, "in (")
			case strings.HasPrefix(rest, "notin ("):
				op, rest = ipam.NotIn, strings.TrimPrefix(rest, "notin (")
			default:
				return nil, fmt.Errorf("term %q: unknown operator", term)
			}
			rest, ok := strings.CutSuffix(rest, ")")
			if !ok {
				return nil, fmt.Errorf("term %q: no closing parenthesis", term)
			}
			s.MatchExpressions = append(s.MatchExpressions, labelReq(key, op, strings.Split(rest, ",")...))
			continue
		}
		if key, value, ok := strings.Cut(term, "="); ok {
			if s.MatchLabels == nil {
				s.MatchLabels = map[string]string{}
			}
			if _, dup := s.MatchLabels[key]; dup {
				return nil, fmt.Errorf("term %q: key repeated", term)
			}
			s.MatchLabels[key] = value
			continue
		}
		s.MatchExpressions = append(s.MatchExpressions, labelReq(term, ipam.Exists))
	}
	return s, nil
}

func FuzzParseLabelSelector(f *testing.F) {
	for _, seed := range []string{
		`{}`,
		`null`,
		`{"matchLabels":{"app":"web","example.com/tier":""}}`,
		`{"matchExpressions":[{"key":"tier","operator":"In","values":["a","b",""]},{"key":"legacy","operator":"DoesNotExist"}]}`,
		`{"matchLabels":{"app":"web"},"matchExpressions":[{"key":"app","operator":"NotIn","values":["db"]},{"key":"zone","operator":"Exists"}]}`,
		`{"matchExpressions":[{"key":"cpu","operator":"Gt","values":["4"]}]}`,
		`{"matchExpressions":[{"key":"a/b/c","operator":"Exists","values":["x"]}]}`,
		`{"matchLabels":{"a":1}}`,
		`{"matchLabels":`,
	} {
		f.Add([]byte(seed))
	}
	probes := []map[string]string{
		nil,
		{},
		{"app": "web"},
		{"app": "", "tier": "a", "zone": "b"},
		{"app": "db", "legacy": "1", "example.com/tier": ""},
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ipam.ParseLabelSelector(data)
		if err != nil {
			var fe *ipam.FieldError
			if !errors.Is(err, ipam.ErrInvalid) || !errors.As(err, &fe) {
				t.Fatalf("error %v (%T) is not a *FieldError that unwraps to ErrInvalid", err, err)
			}
			if s != nil {
				t.Fatalf("non-nil selector %v with error %v", s, err)
			}
			return
		}
		if err := s.Validate("sel"); err != nil {
			t.Fatalf("parsed selector does not validate: %v", err)
		}
		str := s.String()
		back, err := parseLabelSelectorText(str)
		if err != nil {
			t.Fatalf("String() = %q does not parse back: %v", str, err)
		}
		if s == nil {
			back = nil // String cannot tell nil from empty.
		}
		if got := back.String(); got != str {
			t.Fatalf("String() = %q, reparsed %q", str, got)
		}
		for _, labels := range probes {
			if got, want := s.Matches(labels), back.Matches(labels); got != want {
				t.Fatalf("selector %q on %v: Matches = %v, reparsed %v", str, labels, got, want)
			}
			if got, want := s.Matches(labels), naiveLabelMatches(s, labels); got != want {
				t.Fatalf("selector %q on %v: Matches = %v, naive %v", str, labels, got, want)
			}
		}
		data2, err := json.Marshal(s)
		if err != nil {
			t.Fatalf("Marshal: %v", err)
		}
		s2, err := ipam.ParseLabelSelector(data2)
		if err != nil {
			t.Fatalf("re-parse of %s: %v", data2, err)
		}
		if got := s2.String(); got != str {
			t.Fatalf("JSON round trip: String() = %q, want %q", got, str)
		}
	})
}

func ExampleLabelSelector_Matches() {
	s := mustParseLabelSelector(`{
		"matchLabels": {"app": "web"},
		"matchExpressions": [
			{"key": "tier", "operator": "In", "values": ["front", "edge"]},
			{"key": "legacy", "operator": "DoesNotExist"}
		]
	}`)
	fmt.Println(s.Matches(map[string]string{"app": "web", "tier": "front"}))
	fmt.Println(s.Matches(map[string]string{"app": "web", "tier": "back"}))
	fmt.Println(s.Matches(map[string]string{"app": "web", "tier": "edge", "legacy": "true"}))
	// Output:
	// true
	// false
	// false
}

func ExampleLabelSelector_Matches_nilAndEmpty() {
	var none *ipam.LabelSelector
	all := &ipam.LabelSelector{}
	labels := map[string]string{"app": "web"}
	fmt.Println(none.Matches(labels), all.Matches(labels))
	// Output:
	// false true
}

func ExampleLabelSelector_Validate() {
	s := &ipam.LabelSelector{MatchExpressions: []ipam.LabelSelectorRequirement{
		{Key: "tier", Operator: ipam.In},
		{Key: "cpu", Operator: "Gt", Values: []string{"4"}},
	}}
	fmt.Println(s.Validate("podAffinity"))
	// Output:
	// podAffinity.matchExpressions[0].values: must be specified when operator is In
	// podAffinity.matchExpressions[1].operator "Gt": not a valid selector operator
}

func ExampleLabelSelector_String() {
	s := mustParseLabelSelector(`{
		"matchLabels": {"app": "web"},
		"matchExpressions": [
			{"key": "tier", "operator": "In", "values": ["b", "a"]},
			{"key": "legacy", "operator": "DoesNotExist"}
		]
	}`)
	fmt.Println(s)
	// Output:
	// app=web,!legacy,tier in (a,b)
}

func ExampleParseLabelSelector() {
	_, err := ipam.ParseLabelSelector([]byte(`{"matchLabels": {"app": "web!"}}`))
	fmt.Println(err)
	fmt.Println(errors.Is(err, ipam.ErrInvalid))
	// Output:
	// matchLabels[app] "web!": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character
	// true
}

// sel builds a selector from match labels (may be nil) and requirements.
func labelSel(labels map[string]string, reqs ...ipam.LabelSelectorRequirement) *ipam.LabelSelector {
	return &ipam.LabelSelector{MatchLabels: labels, MatchExpressions: reqs}
}

// ml builds a map from key, value pairs.
func labelMap(kv ...string) map[string]string {
	m := map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

func labelReq(key string, op ipam.SelectorOperator, values ...string) ipam.LabelSelectorRequirement {
	return ipam.LabelSelectorRequirement{Key: key, Operator: op, Values: values}
}

// parseLabelSelectorString is ParseLabelSelector on a string.
func parseLabelSelectorString(s string) (*ipam.LabelSelector, error) {
	return ipam.ParseLabelSelector([]byte(s))
}

func labelUnwrapAll(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

func labelJSON(s *ipam.LabelSelector) string {
	data, _ := json.Marshal(s)
	return string(data)
}

// mustParseLabelSelector parses a selector the test writes, failing the
// test binary at once if it is wrong.
func mustParseLabelSelector(s string) *ipam.LabelSelector {
	sel, err := ipam.ParseLabelSelector([]byte(s))
	if err != nil {
		panic(err)
	}
	return sel
}
