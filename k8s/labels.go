package k8s

import (
	"maps"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipamkit/ipam"
)

// LabelSelector converts a Kubernetes label selector to an ipam.LabelSelector
// and validates it as metav1.LabelSelectorAsSelector does: the result accepts
// a selector exactly when Kubernetes does, and then matches exactly the label
// sets the Kubernetes selector matches.
//
// Nil gives nil, which matches nothing; an empty non-nil selector gives an
// empty non-nil one, which matches everything. The result shares no memory
// with s.
//
// On a selector that Kubernetes rejects, LabelSelector returns nil and the
// error of (*ipam.LabelSelector).Validate: every problem at once, each a
// *ipam.FieldError that unwraps to ipam.ErrInvalid.
func LabelSelector(s *metav1.LabelSelector) (*ipam.LabelSelector, error) {
	if s == nil {
		return nil, nil
	}
	out := &ipam.LabelSelector{MatchLabels: maps.Clone(s.MatchLabels)}
	if s.MatchExpressions != nil {
		out.MatchExpressions = make([]ipam.LabelSelectorRequirement, len(s.MatchExpressions))
		for i, r := range s.MatchExpressions {
			out.MatchExpressions[i] = ipam.LabelSelectorRequirement{
				Key:      r.Key,
				Operator: ipam.SelectorOperator(r.Operator),
				Values:   cloneStrings(r.Values),
			}
		}
	}
	if err := out.Validate(""); err != nil {
		return nil, err
	}
	return out, nil
}

// ToLabelSelector converts an ipam.LabelSelector to a Kubernetes label
// selector with the same fields, such as for a pool's podAffinity written to
// a custom resource. It does not validate s. Nil gives nil, and an empty
// non-nil selector an empty non-nil one. The result shares no memory with s.
func ToLabelSelector(s *ipam.LabelSelector) *metav1.LabelSelector {
	if s == nil {
		return nil
	}
	out := &metav1.LabelSelector{MatchLabels: maps.Clone(s.MatchLabels)}
	if s.MatchExpressions != nil {
		out.MatchExpressions = make([]metav1.LabelSelectorRequirement, len(s.MatchExpressions))
		for i, r := range s.MatchExpressions {
			out.MatchExpressions[i] = metav1.LabelSelectorRequirement{
				Key:      r.Key,
				Operator: metav1.LabelSelectorOperator(r.Operator),
				Values:   cloneStrings(r.Values),
			}
		}
	}
	return out
}

// cloneStrings copies s, keeping nil as nil and empty as empty.
func cloneStrings(s []string) []string {
	if s == nil {
		return nil
	}
	return append(make([]string, 0, len(s)), s...)
}
