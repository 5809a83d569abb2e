package ipam_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/stretchr/testify/require"

	"github.com/ipamkit/ipam"
)

// FuzzParseNetworksAnnotation feeds arbitrary annotation values to the Multus
// networks parser. It must not panic; an error must be a *MultusError that
// carries the value and unwraps to ErrInvalid; a result must name a network in
// every entry, survive a round trip through the JSON form (and through the
// text form when its parts allow), and resolve interfaces through SubjectOf
// without error. Seeds are in testdata/fuzz/FuzzParseNetworksAnnotation.
func FuzzParseNetworksAnnotation(f *testing.F) {
	f.Fuzz(func(t *testing.T, s string) {
		sels, err := ipam.ParseNetworksAnnotation(s)
		req := &ipam.Request{Namespace: "pod-ns", Annotations: map[string]string{ipam.AnnotationMultusNetworks: s}}
		if err != nil {
			require.ErrorIs(t, err, ipam.ErrInvalid)
			var me *ipam.MultusError
			require.ErrorAs(t, err, &me)
			require.Equal(t, ipam.AnnotationMultusNetworks, me.Key)
			require.Equal(t, s, me.Value)
			require.NotEmpty(t, me.Reason)
			require.Nil(t, sels)
			_, err := ipam.SubjectOf(req, ipam.NIC{Name: "net1"})
			require.ErrorIs(t, err, ipam.ErrInvalid, "SubjectOf must fail as the parser does")
			return
		}
		for i, n := range sels {
			require.NotEmpty(t, n.Name, "entry %d", i)
			require.NotContains(t, n.Name, "/", "entry %d", i)
			require.NotContains(t, n.Namespace, "/", "entry %d", i)
		}

		// The JSON form of the result parses back to it.
		b, err := json.Marshal(append([]ipam.NetworkSelection{}, sels...))
		require.NoError(t, err)
		again, err := ipam.ParseNetworksAnnotation(string(b))
		require.NoError(t, err, "reparsing %s", b)
		if diff := cmp.Diff(sels, again, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("JSON round trip of %q via %s (-first +second):\n%s", s, b, diff)
		}

		// So does the text form, when every part is a DNS label.
		if text, ok := fuzzNetworksText(sels); ok {
			again, err := ipam.ParseNetworksAnnotation(text)
			require.NoError(t, err, "reparsing %q", text)
			if diff := cmp.Diff(sels, again, cmpopts.EquateEmpty()); diff != "" {
				t.Fatalf("text round trip of %q via %q (-first +second):\n%s", s, text, diff)
			}
		}

		// Interface "<i+1>" is served by entry i at the latest.
		for i := range sels {
			sub, err := ipam.SubjectOf(req, ipam.NIC{Name: strconv.Itoa(i + 1)})
			require.NoError(t, err)
			require.NotEmpty(t, sub.Network)
			require.Equal(t, 1, strings.Count(sub.Network, "/"), "network %q", sub.Network)
		}
	})
}

// fuzzNetworksText writes sels in the text form, or reports false if some
// part could not be written in it.
func fuzzNetworksText(sels []ipam.NetworkSelection) (string, bool) {
	if len(sels) == 0 {
		return "", false
	}
	label := func(s string) bool {
		if s == "" || s[0] == '-' || s[len(s)-1] == '-' {
			return false
		}
		for _, c := range []byte(s) {
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
				return false
			}
		}
		return true
	}
	var b strings.Builder
	for i, n := range sels {
		if !label(n.Name) || n.Namespace != "" && !label(n.Namespace) || n.Interface != "" && !label(n.Interface) {
			return "", false
		}
		if i > 0 {
			b.WriteByte(',')
		}
		if n.Namespace != "" {
			b.WriteString(n.Namespace + "/")
		}
		b.WriteString(n.Name)
		if n.Interface != "" {
			b.WriteString("@" + n.Interface)
		}
	}
	return b.String(), true
}
