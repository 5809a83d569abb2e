package k8s

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	kjson "k8s.io/apimachinery/pkg/util/json"

	"github.com/ipamkit/ipam"
)

// Flags of TestLabelSelectorDiff. Replay a failure with
//
//	go test ./k8s -run TestLabelSelectorDiff -args -labels.seed=N [-labels.case=I]
var (
	labelSeed  = flag.Uint64("labels.seed", 0, "seed of TestLabelSelectorDiff; 0 picks one from the clock")
	labelCases = flag.Int("labels.cases", 20000, "number of random cases of TestLabelSelectorDiff")
	labelCase  = flag.Int("labels.case", -1, "run only this case of TestLabelSelectorDiff (with -labels.seed)")
)

// Small alphabets, so that random selectors and label sets meet: most keys
// and values come from the common lists.
var (
	commonKeys   = []string{"a", "b", "c", "x.io/a"}
	commonValues = []string{"", "1", "2", "v"}

	rareValidKeys = []string{
		"A1", "a.b_c-d", "Z", "9", "x.io/B", "a-b.c/d",
		strings.Repeat("k", 63),
		prefix253 + "/a",
	}
	invalidKeys = []string{
		"", "-a", "a-", "_a", "a_", ".a", "a b", "a/b/c", "/a", "x.io/", "/",
		"X.io/a", "x..io/a", "x.io./a", "-x.io/a", "x_io/a", "x.io/-a",
		"ä", "a\n", "a\x00", "\xff",
		strings.Repeat("k", 64),
		"x" + prefix253 + "/a",
	}
	rareValidValues = []string{"V_2.x", "a-b", "Z", strings.Repeat("v", 63)}
	invalidValues   = []string{"-", "_", ".", "1-", "-1", "_1", "a b", "ü", "v\n", "a/b", strings.Repeat("v", 64)}

	validOperators   = []string{"In", "NotIn", "Exists", "DoesNotExist"}
	invalidOperators = []string{"", "in", "notin", "exists", "Gt", "Lt", "Equals", "=", "!=", "In "}
)

// prefix253 is a DNS subdomain of the greatest length a key prefix may have.
var prefix253 = strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + "." +
	strings.Repeat("c", 63) + "." + strings.Repeat("d", 61)

// gen draws random selectors, label sets and JSON documents.
type gen struct{ r *rand.Rand }

func (g gen) chance(percent int) bool       { return g.r.IntN(100) < percent }
func (g gen) pick(xs []string) string       { return xs[g.r.IntN(len(xs))] }
func (g gen) pickOf(xss ...[]string) string { return g.pick(xss[g.r.IntN(len(xss))]) }

func (g gen) key() string {
	switch p := g.r.IntN(100); {
	case p < 88:
		return g.pick(commonKeys)
	case p < 94:
		return g.pick(rareValidKeys)
	default:
		return g.pick(invalidKeys)
	}
}

func (g gen) value() string {
	switch p := g.r.IntN(100); {
	case p < 91:
		return g.pick(commonValues)
	case p < 95:
		return g.pick(rareValidValues)
	default:
		return g.pick(invalidValues)
	}
}

func (g gen) values(n int) []string {
	vs := make([]string, n)
	for i := range vs {
		vs[i] = g.value()
	}
	return vs
}

// selector draws a selector: nil, empty in every spelling, or up to three
// match labels and three expressions, now and then invalid.
func (g gen) selector() *metav1.LabelSelector {
	switch p := g.r.IntN(100); {
	case p < 2:
		return nil
	case p < 5:
		return &metav1.LabelSelector{}
	case p < 7:
		return &metav1.LabelSelector{MatchLabels: map[string]string{}, MatchExpressions: []metav1.LabelSelectorRequirement{}}
	}
	s := &metav1.LabelSelector{}
	if n := g.r.IntN(4); n > 0 || g.chance(20) {
		s.MatchLabels = make(map[string]string, n)
		for range n {
			s.MatchLabels[g.key()] = g.value()
		}
	}
	if n := g.r.IntN(4); n > 0 || g.chance(20) {
		s.MatchExpressions = make([]metav1.LabelSelectorRequirement, n)
		for i := range s.MatchExpressions {
			s.MatchExpressions[i] = g.requirement()
		}
	}
	return s
}

func (g gen) requirement() metav1.LabelSelectorRequirement {
	r := metav1.LabelSelectorRequirement{Key: g.key()}
	if g.chance(4) {
		r.Operator = metav1.LabelSelectorOperator(g.pick(invalidOperators))
	} else {
		r.Operator = metav1.LabelSelectorOperator(g.pick(validOperators))
	}
	switch r.Operator {
	case metav1.LabelSelectorOpExists, metav1.LabelSelectorOpDoesNotExist:
		switch p := g.r.IntN(100); {
		case p < 6: // invalid: values with Exists or DoesNotExist
			r.Values = g.values(1 + g.r.IntN(2))
		case p < 15:
			r.Values = []string{}
		}
	default:
		switch p := g.r.IntN(100); {
		case p < 4: // invalid for In and NotIn
			r.Values = nil
		case p < 7:
			r.Values = []string{}
		default:
			r.Values = g.values(1 + g.r.IntN(3))
		}
	}
	return r
}

// labelSet draws a label set over the common keys and values, now and then
// with a rarer key.
func (g gen) labelSet() map[string]string {
	m := make(map[string]string)
	for _, k := range commonKeys {
		if g.chance(50) {
			m[k] = g.pick(commonValues)
		}
	}
	if g.chance(5) {
		m[g.pick(rareValidKeys)] = g.pickOf(commonValues, rareValidValues)
	}
	if g.chance(3) {
		m[g.pick(invalidKeys)] = g.pickOf(commonValues, invalidValues)
	}
	if len(m) == 0 && g.chance(50) {
		return nil
	}
	return m
}

// satisfying changes a label set towards one that s matches, so that matches
// are common; conflicting requirements still make it miss.
func (g gen) satisfying(s *metav1.LabelSelector, base map[string]string) map[string]string {
	m := maps.Clone(base)
	if m == nil {
		m = make(map[string]string)
	}
	if s == nil {
		return m
	}
	for k, v := range s.MatchLabels {
		m[k] = v
	}
	for _, r := range s.MatchExpressions {
		switch r.Operator {
		case metav1.LabelSelectorOpIn:
			if len(r.Values) > 0 {
				m[r.Key] = g.pick(r.Values)
			}
		case metav1.LabelSelectorOpNotIn:
			if g.chance(50) {
				delete(m, r.Key)
			} else {
				m[r.Key] = g.pick(commonValues)
			}
		case metav1.LabelSelectorOpExists:
			if _, ok := m[r.Key]; !ok {
				m[r.Key] = g.pick(commonValues)
			}
		case metav1.LabelSelectorOpDoesNotExist:
			delete(m, r.Key)
		}
	}
	return m
}

// oursOf copies s field by field into an ipam.LabelSelector, keeping nil and
// empty apart. It is the test's own conversion, independent of LabelSelector.
func oursOf(s *metav1.LabelSelector) *ipam.LabelSelector {
	if s == nil {
		return nil
	}
	o := &ipam.LabelSelector{MatchLabels: s.MatchLabels}
	if s.MatchExpressions != nil {
		o.MatchExpressions = []ipam.LabelSelectorRequirement{}
	}
	for _, r := range s.MatchExpressions {
		o.MatchExpressions = append(o.MatchExpressions, ipam.LabelSelectorRequirement{
			Key: r.Key, Operator: ipam.SelectorOperator(r.Operator), Values: r.Values,
		})
	}
	return o
}

// diffStats counts what the random cases covered, so that a change to the
// generator that stops exercising a path is noticed.
type diffStats struct {
	cases, accepted, rejected, matched, missed int
	strings                                    int
	jsonOK, jsonErr, jsonCaseVariant           int
	caseVariantDiffers                         int
}

// differ compares one selector and its label sets; it reports through errorf,
// which names the seed and case.
type differ struct {
	errorf func(format string, args ...any)
	stats  *diffStats
}

// selector compares ours and Kubernetes's on s and the label sets.
func (d differ) selector(s *metav1.LabelSelector, sets []map[string]string) {
	d.stats.cases++
	ours := oursOf(s)
	desc := describe(s)

	ksel, kerr := metav1.LabelSelectorAsSelector(s)
	oerr := ours.Validate("")
	if (kerr == nil) != (oerr == nil) {
		d.errorf("validation differs on %s:\n  ours: %v\n  k8s:  %v", desc, oerr, kerr)
		return
	}
	if oerr != nil && !errors.Is(oerr, ipam.ErrInvalid) {
		d.errorf("Validate(%s) = %v, want an error that is ipam.ErrInvalid", desc, oerr)
	}

	// The package's conversions agree with the plain copy and the verdict.
	conv, cerr := LabelSelector(s)
	switch {
	case (cerr == nil) != (kerr == nil):
		d.errorf("LabelSelector(%s) error = %v, k8s error = %v", desc, cerr, kerr)
	case cerr == nil:
		if diff := cmp.Diff(ours, conv); diff != "" {
			d.errorf("LabelSelector(%s) (-want +got):\n%s", desc, diff)
		}
	case conv != nil:
		d.errorf("LabelSelector(%s) = %+v with error %v, want nil", desc, conv, cerr)
	}
	if diff := cmp.Diff(s, ToLabelSelector(ours)); diff != "" {
		d.errorf("ToLabelSelector round trip of %s (-want +got):\n%s", desc, diff)
	}

	if kerr != nil {
		d.stats.rejected++
		// A selector Validate rejects matches nothing, as documented.
		for _, m := range sets {
			if ours.Matches(m) {
				d.errorf("invalid selector %s matches %v; want no match (%v)", desc, m, oerr)
			}
		}
		return
	}
	d.stats.accepted++
	for _, m := range sets {
		got, want := ours.Matches(m), ksel.Matches(labels.Set(m))
		if got != want {
			d.errorf("Matches differs on %s with labels %s:\n  ours: %v\n  k8s:  %v", desc, describeSet(m), got, want)
		}
		if want {
			d.stats.matched++
		} else {
			d.stats.missed++
		}
	}
	// String: only when keys are distinct, since Kubernetes sorts its
	// requirements by key with an unstable sort.
	if distinctKeys(s) {
		d.stats.strings++
		if got, want := ours.String(), ksel.String(); got != want {
			d.errorf("String differs on %s:\n  ours: %q\n  k8s:  %q", desc, got, want)
		}
	}
}

// json compares decoding data into both types, with encoding/json, which
// ipam uses, and with Kubernetes's own case-sensitive decoder.
// caseVariant says that data may spell a field name in another case; sure,
// that it certainly does (the generator knows, the fuzzer only suspects).
func (d differ) json(data []byte, caseVariant, sure bool, sets []map[string]string) {
	var (
		k, kc *metav1.LabelSelector
		o     *ipam.LabelSelector
	)
	kerr := json.Unmarshal(data, &k)
	oerr := json.Unmarshal(data, &o)
	kcerr := kjson.Unmarshal(data, &kc)
	if (kerr == nil) != (oerr == nil) {
		d.errorf("json.Unmarshal of %s differs:\n  ours: %v\n  k8s:  %v", data, oerr, kerr)
		return
	}
	if oerr != nil {
		d.stats.jsonErr++
		if kcerr == nil && !caseVariant {
			d.errorf("json.Unmarshal of %s: ours fails (%v), Kubernetes's decoder accepts it as %s", data, oerr, describe(kc))
		}
		if _, err := ipam.ParseLabelSelector(data); err == nil {
			d.errorf("ParseLabelSelector(%s) accepts JSON that json.Unmarshal rejects (%v)", data, oerr)
		}
		return
	}
	d.stats.jsonOK++
	if diff := cmp.Diff(oursOf(k), o); diff != "" {
		d.errorf("json.Unmarshal of %s (-k8s +ours):\n%s", data, diff)
	}

	// ParseLabelSelector accepts exactly what decodes and converts in k8s,
	// except a known field spelt in another case, which it refuses on purpose
	// (kubectl's strict field validation refuses it too; the API server would
	// drop it, and the selector would mean something else).
	_, asErr := metav1.LabelSelectorAsSelector(k)
	_, perr := ipam.ParseLabelSelector(data)
	caseErr := perr != nil && strings.Contains(perr.Error(), "case-sensitive")
	switch {
	case sure && !caseErr:
		d.errorf("ParseLabelSelector(%s) error = %v, want a case-sensitivity error", data, perr)
	case caseVariant && caseErr:
	case (perr == nil) != (asErr == nil):
		d.errorf("ParseLabelSelector(%s) error = %v, k8s LabelSelectorAsSelector error = %v", data, perr, asErr)
	}

	// Kubernetes's decoder matches field names case-sensitively; ours, like
	// encoding/json, does not (documented at ipam.ParseLabelSelector). With
	// exact names the two agree; with another case they may not, which is
	// counted, not failed.
	if kcerr != nil {
		if !caseVariant {
			d.errorf("Kubernetes's decoder rejects %s (%v); ours accepts it", data, kcerr)
		}
		return
	}
	if !caseVariant {
		if diff := cmp.Diff(oursOf(kc), o); diff != "" {
			d.errorf("decoding %s with Kubernetes's decoder (-k8s +ours):\n%s", data, diff)
		}
		return
	}
	d.stats.jsonCaseVariant++
	kcsel, kcAsErr := metav1.LabelSelectorAsSelector(kc)
	differs := !cmp.Equal(oursOf(kc), o) || (kcAsErr == nil) != (o.Validate("") == nil)
	if !differs && kcAsErr == nil {
		for _, m := range sets {
			if o.Matches(m) != kcsel.Matches(labels.Set(m)) {
				differs = true
			}
		}
	}
	if differs {
		d.stats.caseVariantDiffers++
	}
}

func describe(s *metav1.LabelSelector) string {
	if s == nil {
		return "<nil selector>"
	}
	b, err := json.Marshal(s)
	if err != nil {
		return fmt.Sprintf("%#v", s)
	}
	return fmt.Sprintf("%s (matchLabels nil=%v, matchExpressions nil=%v)", b, s.MatchLabels == nil, s.MatchExpressions == nil)
}

func describeSet(m map[string]string) string {
	if m == nil {
		return "<nil>"
	}
	b, _ := json.Marshal(m)
	return string(b)
}

func distinctKeys(s *metav1.LabelSelector) bool {
	if s == nil {
		return true
	}
	seen := make(map[string]bool)
	for k := range s.MatchLabels {
		seen[k] = true
	}
	for _, r := range s.MatchExpressions {
		if seen[r.Key] {
			return false
		}
		seen[r.Key] = true
	}
	return true
}

// Field names as spelled in JSON, and other spellings encoding/json accepts.
var fieldSpellings = map[string][]string{
	"matchLabels":      {"MatchLabels", "matchlabels", "MATCHLABELS"},
	"matchExpressions": {"MatchExpressions", "matchexpressions"},
	"key":              {"Key", "KEY"},
	"operator":         {"Operator", "OPERATOR"},
	"values":           {"Values", "VALUES"},
}

// jsonDoc writes s as JSON in one of the spellings a user might send: fields
// in any order, empty fields omitted, null or empty, field names now and then
// in another case, unknown and duplicate fields; now and then a type error or
// a truncated document. It reports whether a field name is in another case.
func (g gen) jsonDoc(s *metav1.LabelSelector) (data []byte, caseVariant bool) {
	name := func(canon string) string {
		if g.chance(2) {
			caseVariant = true
			return quote(g.pick(fieldSpellings[canon]))
		}
		return quote(canon)
	}
	var doc string
	if s == nil {
		doc = g.pick([]string{"null", " null ", "\tnull\n"})
	} else {
		var fields []string
		switch {
		case s.MatchLabels != nil || g.chance(15):
			var kv []string
			for _, k := range slices.Sorted(maps.Keys(s.MatchLabels)) {
				kv = append(kv, quote(k)+":"+quote(s.MatchLabels[k]))
			}
			g.r.Shuffle(len(kv), func(i, j int) { kv[i], kv[j] = kv[j], kv[i] })
			fields = append(fields, name("matchLabels")+":{"+strings.Join(kv, ",")+"}")
		case g.chance(10):
			fields = append(fields, name("matchLabels")+":null")
		}
		switch {
		case s.MatchExpressions != nil || g.chance(15):
			var rs []string
			for _, r := range s.MatchExpressions {
				var rf []string
				rf = append(rf, name("key")+":"+quote(r.Key))
				rf = append(rf, name("operator")+":"+quote(string(r.Operator)))
				switch {
				case r.Values != nil:
					vs := make([]string, len(r.Values))
					for i, v := range r.Values {
						vs[i] = quote(v)
					}
					rf = append(rf, name("values")+":["+strings.Join(vs, ",")+"]")
				case g.chance(20):
					rf = append(rf, name("values")+":null")
				}
				if g.chance(3) {
					rf = append(rf, `"extra":{"values":["x"]}`)
				}
				g.r.Shuffle(len(rf), func(i, j int) { rf[i], rf[j] = rf[j], rf[i] })
				rs = append(rs, "{"+strings.Join(rf, ",")+"}")
			}
			fields = append(fields, name("matchExpressions")+":["+strings.Join(rs, ",")+"]")
		case g.chance(10):
			fields = append(fields, name("matchExpressions")+":null")
		}
		if g.chance(4) {
			fields = append(fields, `"unknown":[1,{"matchLabels":null}]`)
		}
		g.r.Shuffle(len(fields), func(i, j int) { fields[i], fields[j] = fields[j], fields[i] })
		if g.chance(3) {
			// A duplicate field before the real one: the last one wins.
			fields = append([]string{`"matchLabels":{"zz":"1"}`}, fields...)
		}
		doc = "{" + strings.Join(fields, ",") + "}"
	}

	switch p := g.r.IntN(100); {
	case p < 2:
		doc = doc[:g.r.IntN(len(doc))]
	case p < 5:
		doc = g.pick([]string{
			`[]`, `"app=web"`, `7`, `true`,
			`{"matchLabels":{"a":1}}`,
			`{"matchLabels":["a"]}`,
			`{"matchExpressions":{}}`,
			`{"matchExpressions":[{"key":1,"operator":"Exists"}]}`,
			`{"matchExpressions":[{"key":"a","operator":"In","values":"1"}]}`,
			`{"matchExpressions":[{"key":"a","operator":"In","values":[1]}]}`,
			`{"matchExpressions":[7]}`,
			`{"matchLabels":{"a":null}}`,
			`{"matchExpressions":[null]}`,
		})
		caseVariant = false
	}
	return []byte(doc), caseVariant
}

func quote(s string) string {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// labelDiffEdgeCases are fixed selectors worth checking on every run.
var labelDiffEdgeCases = []*metav1.LabelSelector{
	nil,
	{},
	{MatchLabels: map[string]string{}},
	{MatchExpressions: []metav1.LabelSelectorRequirement{}},
	{MatchLabels: map[string]string{"a": ""}},
	{MatchLabels: map[string]string{"": "1"}},
	{MatchLabels: map[string]string{"a": "-"}},
	{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "In"}}},
	{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "In", Values: []string{}}}},
	{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "NotIn", Values: []string{}}}},
	{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "NotIn", Values: []string{""}}}},
	{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "In", Values: []string{""}}}},
	{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Exists", Values: []string{}}}},
	{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Exists", Values: []string{"1"}}}},
	{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "DoesNotExist", Values: []string{""}}}},
	{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: ""}}},
	{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Gt", Values: []string{"1"}}}},
	{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "", Operator: "Exists"}}},
	{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: prefix253 + "/" + strings.Repeat("k", 63), Operator: "Exists"}}},
	{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "x" + prefix253 + "/a", Operator: "Exists"}}},
	{
		MatchLabels:      map[string]string{"a": "1"},
		MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "NotIn", Values: []string{"1"}}},
	},
	{
		MatchLabels: map[string]string{"a": "1", "b": "2"},
		MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "c", Operator: "In", Values: []string{"v", "1", "v"}},
			{Key: "x.io/a", Operator: "DoesNotExist"},
		},
	},
}

// TestLabelSelectorDiff compares ipam.LabelSelector with Kubernetes's own
// label selectors on fixed edge cases and on random selectors, label sets and
// JSON documents: whether each accepts a selector, which label sets it
// matches, its string form, and what a JSON document decodes to.
func TestLabelSelectorDiff(t *testing.T) {
	seed := *labelSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d: replay with -args -labels.seed=%d", seed, seed)

	var stats diffStats
	failures := 0
	newDiffer := func(where string) differ {
		return differ{stats: &stats, errorf: func(format string, args ...any) {
			t.Helper()
			failures++
			if failures <= 20 {
				t.Errorf("%s: "+format, append([]any{where}, args...)...)
			}
		}}
	}

	// Fixed edge cases, against fixed label sets.
	fixedSets := []map[string]string{
		nil, {}, {"a": ""}, {"a": "1"}, {"a": "1", "b": "2"}, {"a": "1", "b": "2", "c": "v"}, {"b": "2", "c": "1"},
	}
	for i, s := range labelDiffEdgeCases {
		d := newDiffer(fmt.Sprintf("edge case %d", i))
		d.selector(s, fixedSets)
		b, _ := json.Marshal(s)
		d.json(b, false, false, fixedSets)
	}

	first, last := 0, *labelCases
	if *labelCase >= 0 {
		first, last = *labelCase, *labelCase+1
	}
	for i := first; i < last; i++ {
		g := gen{rand.New(rand.NewPCG(seed, uint64(i)))}
		s := g.selector()
		sets := make([]map[string]string, 0, 6)
		for range 4 {
			sets = append(sets, g.labelSet())
		}
		sets = append(sets, g.satisfying(s, g.labelSet()), g.satisfying(s, nil))

		d := newDiffer(fmt.Sprintf("seed %d case %d", seed, i))
		d.selector(s, sets)
		data, caseVariant := g.jsonDoc(s)
		d.json(data, caseVariant, caseVariant, sets)
	}
	if failures > 20 {
		t.Errorf("%d more differences not shown", failures-20)
	}
	t.Logf("%+v", stats)

	if *labelCase >= 0 {
		return
	}
	// The generator must keep exercising every path.
	for _, c := range []struct {
		name string
		n    int
	}{
		{"accepted selectors", stats.accepted},
		{"rejected selectors", stats.rejected},
		{"matches", stats.matched},
		{"misses", stats.missed},
		{"compared strings", stats.strings},
		{"decoded JSON documents", stats.jsonOK},
		{"rejected JSON documents", stats.jsonErr},
		{"JSON documents with field names in another case", stats.jsonCaseVariant},
	} {
		if c.n < *labelCases/100 {
			t.Errorf("only %d %s in %d cases; the generator no longer covers them", c.n, c.name, *labelCases)
		}
	}
}

// TestLabelSelectorNilAndEmpty pins the documented difference between a nil
// selector, which matches nothing, and an empty one, which matches
// everything, in both packages.
func TestLabelSelectorNilAndEmpty(t *testing.T) {
	set := labels.Set{"app": "web"}
	for _, c := range []struct {
		name string
		s    *metav1.LabelSelector
		want bool
	}{
		{"nil", nil, false},
		{"empty", &metav1.LabelSelector{}, true},
		{"empty fields", &metav1.LabelSelector{MatchLabels: map[string]string{}, MatchExpressions: []metav1.LabelSelectorRequirement{}}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			ksel, err := metav1.LabelSelectorAsSelector(c.s)
			if err != nil {
				t.Fatal(err)
			}
			if got := ksel.Matches(set); got != c.want {
				t.Errorf("k8s: Matches = %v, want %v", got, c.want)
			}
			ours, err := LabelSelector(c.s)
			if err != nil {
				t.Fatal(err)
			}
			if (ours == nil) != (c.s == nil) {
				t.Errorf("LabelSelector(%s) = %+v: nil-ness changed", describe(c.s), ours)
			}
			if got := ours.Matches(set); got != c.want {
				t.Errorf("ours: Matches = %v, want %v", got, c.want)
			}
			if !ours.IsEmpty() {
				t.Errorf("ours: IsEmpty = false, want true")
			}
			if ours.String() != "" || ksel.String() != "" {
				t.Errorf("String: ours %q, k8s %q; want both empty", ours.String(), ksel.String())
			}
		})
	}
}

// FuzzLabelSelectorJSON decodes arbitrary JSON into both types and compares
// them as TestLabelSelectorDiff does.
func FuzzLabelSelectorJSON(f *testing.F) {
	for _, s := range []string{
		`null`, `{}`, `{"matchLabels":{}}`, `{"matchLabels":{"a":"1"}}`,
		`{"matchExpressions":[{"key":"a","operator":"In","values":["1","2"]}]}`,
		`{"matchExpressions":[{"key":"a","operator":"NotIn","values":[]}]}`,
		`{"matchExpressions":[{"key":"x.io/a","operator":"Exists"}],"matchLabels":{"b":""}}`,
		`{"matchExpressions":[{"key":"a","operator":"DoesNotExist","values":null}]}`,
		`{"MatchLabels":{"a":"1"}}`, `{"matchLabels":{"a":1}}`, `[`,
	} {
		f.Add([]byte(s))
	}
	sets := []map[string]string{nil, {"a": "1"}, {"a": "2", "b": ""}, {"x.io/a": "v", "b": "1"}}
	f.Fuzz(func(t *testing.T, data []byte) {
		var stats diffStats
		d := differ{stats: &stats, errorf: func(format string, args ...any) {
			t.Helper()
			t.Errorf(format, args...)
		}}
		// Whether a field name is in another case is not known here:
		// compare with Kubernetes's decoder only where the names are exact.
		d.json(data, !exactFieldNames(data), false, sets)
		var k *metav1.LabelSelector
		if json.Unmarshal(data, &k) == nil {
			d.selector(k, sets)
		}
	})
}

// exactFieldNames reports whether every object key in data that spells a
// selector field in some case spells it exactly. It errs towards false.
func exactFieldNames(data []byte) bool {
	var v any
	if json.Unmarshal(data, &v) != nil {
		return true
	}
	var walk func(any) bool
	walk = func(v any) bool {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				for canon := range fieldSpellings {
					if k != canon && strings.EqualFold(k, canon) {
						return false
					}
				}
				if !walk(e) {
					return false
				}
			}
		case []any:
			for _, e := range v {
				if !walk(e) {
					return false
				}
			}
		}
		return true
	}
	return walk(v)
}
