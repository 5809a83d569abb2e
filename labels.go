package ipam

import (
	"cmp"
	"encoding/json"
	"errors"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/ipamkit/ipam/internal/k8slabel"
)

// SelectorOperator relates a label key to a set of values in a
// LabelSelectorRequirement. Only the four operators of a Kubernetes
// LabelSelector exist; Gt and Lt, which node selectors have, do not.
//
// The zero SelectorOperator is not a valid operator.
// A SelectorOperator is a string and safe for concurrent use.
type SelectorOperator string

// The operators of a Kubernetes LabelSelector, spelled as in its JSON.
const (
	// In requires the key to be present with one of the values.
	In SelectorOperator = "In"
	// NotIn requires the key to be absent or to have none of the values.
	NotIn SelectorOperator = "NotIn"
	// Exists requires the key to be present, with any value.
	Exists SelectorOperator = "Exists"
	// DoesNotExist requires the key to be absent.
	DoesNotExist SelectorOperator = "DoesNotExist"
)

// LabelSelector selects label sets. It has the JSON shape and the meaning of a
// Kubernetes metav1.LabelSelector: every entry of MatchLabels and every
// requirement of MatchExpressions must hold.
//
// A nil *LabelSelector matches nothing; the zero LabelSelector, with no labels
// and no expressions, matches everything.
// A LabelSelector is safe for concurrent reads; its methods do not modify it.
type LabelSelector struct {
	// MatchLabels requires each key to be present with exactly its value.
	MatchLabels map[string]string `json:"matchLabels,omitempty"`
	// MatchExpressions are further requirements, all of which must hold.
	MatchExpressions []LabelSelectorRequirement `json:"matchExpressions,omitempty"`
}

// LabelSelectorRequirement is one requirement of a LabelSelector: a key, an
// operator and, for In and NotIn, the values. It has the JSON shape of a
// Kubernetes metav1.LabelSelectorRequirement.
//
// The zero LabelSelectorRequirement is invalid: it has no key and no operator.
// A LabelSelectorRequirement is safe for concurrent reads.
type LabelSelectorRequirement struct {
	// Key is the label key, a qualified name such as "app" or "example.com/tier".
	Key string `json:"key"`
	// Operator relates Key to Values.
	Operator SelectorOperator `json:"operator"`
	// Values must be non-empty for In and NotIn and empty for Exists and
	// DoesNotExist.
	Values []string `json:"values,omitempty"`
}

// ParseLabelSelector parses the JSON form of a Kubernetes LabelSelector, such as
// {"matchLabels":{"app":"web"}}, and validates it. Unknown fields are ignored,
// as Kubernetes clients ignore them; a known field written in another case
// ("MatchLabels") is an error, for the Kubernetes API server would not take it
// as that field. The JSON literal null gives a nil selector,
// which matches nothing, as a null selector does in Kubernetes.
//
// Every error is a *FieldError, or several joined with errors.Join, and
// unwraps to ErrInvalid. Field paths start at the selector, as in
// "matchExpressions[1].operator"; malformed JSON is reported on the field
// "labelSelector".
func ParseLabelSelector(data []byte) (*LabelSelector, error) {
	var s *LabelSelector
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, labelSelectorJSONError(err)
	}
	if err := checkFieldCase(data, &s, ""); err != nil {
		return nil, err
	}
	if err := s.Validate(""); err != nil {
		return nil, err
	}
	return s, nil
}

// labelSelectorJSONError turns an error of json.Unmarshal into a *FieldError.
func labelSelectorJSONError(err error) error {
	var (
		syntaxErr *json.SyntaxError
		typeErr   *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &syntaxErr):
		return &FieldError{
			Field:  "labelSelector",
			Reason: "malformed JSON at byte " + strconv.FormatInt(syntaxErr.Offset, 10) + ": " + syntaxErr.Error(),
		}
	case errors.As(err, &typeErr):
		field := typeErr.Field
		if field == "" {
			field = "labelSelector"
		}
		return &FieldError{
			Field:  field,
			Reason: "got JSON " + typeErr.Value + ", want " + jsonKind(typeErr.Type),
		}
	default:
		// Truncated input (io.ErrUnexpectedEOF) and anything else.
		return &FieldError{Field: "labelSelector", Reason: "malformed JSON: " + err.Error()}
	}
}

// jsonKind names the JSON kind that decodes into t.
func jsonKind(t reflect.Type) string {
	if t == nil {
		return "another type"
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Map, reflect.Struct:
		return "object"
	case reflect.Slice, reflect.Array:
		return "array"
	case reflect.Pointer:
		return jsonKind(t.Elem())
	default:
		return t.String()
	}
}

// IsEmpty reports whether s has no requirements: s is nil, or has neither
// match labels nor match expressions. Beware that a nil selector matches
// nothing while an empty non-nil one matches everything.
func (s *LabelSelector) IsEmpty() bool {
	return s == nil || len(s.MatchLabels)+len(s.MatchExpressions) == 0
}

// Validate checks s as Kubernetes validates a LabelSelector and returns every
// problem at once, joined with errors.Join, each a *FieldError that unwraps to
// ErrInvalid. Field paths start with field, as in
// "podAffinity.matchExpressions[1].operator"; field may be empty. A nil
// selector is valid.
func (s *LabelSelector) Validate(field string) error {
	var fe fieldErrors
	s.validate(&fe, field)
	return fe.err()
}

// validate appends the problems of s to fe, with field paths starting at field.
func (s *LabelSelector) validate(fe *fieldErrors, field string) {
	if s == nil {
		return
	}
	mlPath := labelFieldPath(field, "matchLabels")
	for _, k := range slices.Sorted(maps.Keys(s.MatchLabels)) {
		if reason := k8slabel.KeyProblem(k); reason != "" {
			fe.add(mlPath, k, reason)
		}
		v := s.MatchLabels[k]
		if reason := k8slabel.ValueProblem(v); reason != "" {
			fe.add(mlPath+"["+k+"]", v, reason)
		}
	}
	mePath := labelFieldPath(field, "matchExpressions")
	for i := range s.MatchExpressions {
		r := &s.MatchExpressions[i]
		path := mePath + "[" + strconv.Itoa(i) + "]"
		if reason := k8slabel.KeyProblem(r.Key); reason != "" {
			fe.add(path+".key", r.Key, reason)
		}
		switch r.Operator {
		case In, NotIn:
			if len(r.Values) == 0 {
				fe.add(path+".values", "", "must be specified when operator is %s", r.Operator)
			}
		case Exists, DoesNotExist:
			if len(r.Values) > 0 {
				fe.add(path+".values", strings.Join(r.Values, ","), "may not be specified when operator is %s", r.Operator)
			}
		case "":
			fe.add(path+".operator", "", "must be specified")
		default:
			fe.add(path+".operator", string(r.Operator), "not a valid selector operator")
		}
		for j, v := range r.Values {
			if reason := k8slabel.ValueProblem(v); reason != "" {
				fe.add(path+".values["+strconv.Itoa(j)+"]", v, reason)
			}
		}
	}
}

func labelFieldPath(prefix, child string) string {
	if prefix == "" {
		return child
	}
	return prefix + "." + child
}

// Matches reports whether labels satisfy s, as the selector that Kubernetes's
// metav1.LabelSelectorAsSelector makes of s would: a nil selector matches
// nothing and an empty one everything; otherwise every match label and every
// expression must hold. A selector that Validate rejects matches nothing, as
// LabelSelectorAsSelector refuses it. Matches does not allocate.
func (s *LabelSelector) Matches(labels map[string]string) bool {
	if s == nil {
		return false
	}
	for k, v := range s.MatchLabels {
		if k8slabel.KeyProblem(k) != "" || k8slabel.ValueProblem(v) != "" {
			return false
		}
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	for i := range s.MatchExpressions {
		if !s.MatchExpressions[i].matches(labels) {
			return false
		}
	}
	return true
}

// matches reports whether r is valid and labels satisfy it.
func (r *LabelSelectorRequirement) matches(labels map[string]string) bool {
	if k8slabel.KeyProblem(r.Key) != "" {
		return false
	}
	for _, v := range r.Values {
		if k8slabel.ValueProblem(v) != "" {
			return false
		}
	}
	got, ok := labels[r.Key]
	switch r.Operator {
	case In:
		return ok && slices.Contains(r.Values, got)
	case NotIn:
		return len(r.Values) > 0 && (!ok || !slices.Contains(r.Values, got))
	case Exists:
		return len(r.Values) == 0 && ok
	case DoesNotExist:
		return len(r.Values) == 0 && !ok
	default:
		return false
	}
}

// String returns s in the string form of a Kubernetes label selector, for
// messages: requirements sorted by key and joined by commas, as in
// "app=web,tier in (a,b),!legacy,zone notin (x)". Values of a set are sorted.
// Both a nil and an empty selector give "", as in Kubernetes. The form of a
// selector that Validate rejects is a best effort.
func (s *LabelSelector) String() string {
	if s.IsEmpty() {
		return ""
	}
	type term struct {
		key string
		eq  string // value of a match label
		r   *LabelSelectorRequirement
	}
	// Labels first, then expressions, sorted stably by key: a label comes
	// before the expressions on its key (label keys are unique, so the map's
	// order does not matter), and expressions keep their order.
	var buf [8]term
	terms := buf[:0]
	size := 0
	for k, v := range s.MatchLabels {
		terms = append(terms, term{key: k, eq: v})
		size += len(k) + len(v) + 2
	}
	for i := range s.MatchExpressions {
		r := &s.MatchExpressions[i]
		terms = append(terms, term{key: r.Key, r: r})
		size += len(r.Key) + 12
		for _, v := range r.Values {
			size += len(v) + 1
		}
	}
	slices.SortStableFunc(terms, func(a, b term) int { return cmp.Compare(a.key, b.key) })

	var b strings.Builder
	b.Grow(size)
	for i, t := range terms {
		if i > 0 {
			b.WriteByte(',')
		}
		if t.r == nil {
			b.WriteString(t.key)
			b.WriteByte('=')
			b.WriteString(t.eq)
			continue
		}
		switch t.r.Operator {
		case Exists:
			b.WriteString(t.key)
			continue
		case DoesNotExist:
			b.WriteByte('!')
			b.WriteString(t.key)
			continue
		case In:
			b.WriteString(t.key)
			b.WriteString(" in (")
		case NotIn:
			b.WriteString(t.key)
			b.WriteString(" notin (")
		default:
			b.WriteString(t.key)
			b.WriteByte(' ')
			b.WriteString(string(t.r.Operator))
			b.WriteString(" (")
		}
		values := t.r.Values
		if !slices.IsSorted(values) {
			values = slices.Sorted(slices.Values(values))
		}
		for j, v := range values {
			if j > 0 {
				b.WriteByte(',')
			}
			b.WriteString(v)
		}
		b.WriteByte(')')
	}
	return b.String()
}
