package k8s

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipamkit/ipam"
)

func TestLabelSelectorConversion(t *testing.T) {
	for _, c := range []struct {
		name string
		k    *metav1.LabelSelector
		ours *ipam.LabelSelector
	}{
		{"nil", nil, nil},
		{"empty", &metav1.LabelSelector{}, &ipam.LabelSelector{}},
		{
			"empty fields kept",
			&metav1.LabelSelector{MatchLabels: map[string]string{}, MatchExpressions: []metav1.LabelSelectorRequirement{}},
			&ipam.LabelSelector{MatchLabels: map[string]string{}, MatchExpressions: []ipam.LabelSelectorRequirement{}},
		},
		{
			"every operator",
			&metav1.LabelSelector{
				MatchLabels: map[string]string{"app": "web", "example.com/tier": ""},
				MatchExpressions: []metav1.LabelSelectorRequirement{
					{Key: "zone", Operator: metav1.LabelSelectorOpIn, Values: []string{"a", "b"}},
					{Key: "env", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"dev"}},
					{Key: "gpu", Operator: metav1.LabelSelectorOpExists},
					{Key: "legacy", Operator: metav1.LabelSelectorOpDoesNotExist, Values: []string{}},
				},
			},
			&ipam.LabelSelector{
				MatchLabels: map[string]string{"app": "web", "example.com/tier": ""},
				MatchExpressions: []ipam.LabelSelectorRequirement{
					{Key: "zone", Operator: ipam.In, Values: []string{"a", "b"}},
					{Key: "env", Operator: ipam.NotIn, Values: []string{"dev"}},
					{Key: "gpu", Operator: ipam.Exists},
					{Key: "legacy", Operator: ipam.DoesNotExist, Values: []string{}},
				},
			},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := LabelSelector(c.k)
			require.NoError(t, err)
			if diff := cmp.Diff(c.ours, got); diff != "" {
				t.Errorf("LabelSelector (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(c.k, ToLabelSelector(c.ours)); diff != "" {
				t.Errorf("ToLabelSelector (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLabelSelectorInvalid(t *testing.T) {
	k := &metav1.LabelSelector{
		MatchLabels: map[string]string{"-bad": "ok"},
		MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "a", Operator: metav1.LabelSelectorOpIn},
			{Key: "b", Operator: "Gt", Values: []string{"1"}},
		},
	}
	got, err := LabelSelector(k)
	require.Error(t, err)
	require.Nil(t, got)
	require.ErrorIs(t, err, ipam.ErrInvalid)
	var fe *ipam.FieldError
	require.True(t, errors.As(err, &fe), "error %v has no *ipam.FieldError", err)
	for _, field := range []string{"matchLabels", "matchExpressions[0].values", "matchExpressions[1].operator"} {
		require.ErrorContains(t, err, field)
	}
	_, kerr := metav1.LabelSelectorAsSelector(k)
	require.Error(t, kerr, "Kubernetes accepts what LabelSelector rejects")
}

// The results share no memory with the arguments.
func TestLabelSelectorCopies(t *testing.T) {
	k := &metav1.LabelSelector{
		MatchLabels:      map[string]string{"app": "web"},
		MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "zone", Operator: metav1.LabelSelectorOpIn, Values: []string{"a"}}},
	}
	ours, err := LabelSelector(k)
	require.NoError(t, err)
	ours.MatchLabels["app"] = "db"
	ours.MatchExpressions[0].Values[0] = "b"
	require.Equal(t, "web", k.MatchLabels["app"])
	require.Equal(t, "a", k.MatchExpressions[0].Values[0])

	back := ToLabelSelector(ours)
	back.MatchLabels["app"] = "cache"
	back.MatchExpressions[0].Values[0] = "c"
	require.Equal(t, "db", ours.MatchLabels["app"])
	require.Equal(t, "b", ours.MatchExpressions[0].Values[0])
}
