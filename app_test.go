package ipam_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ipamkit/ipam"
)

func TestSubjectOfApp(t *testing.T) {
	req := ipam.Request{Namespace: "ns1", Name: "web-0", App: filterApp()}
	s, err := ipam.SubjectOf(&req, ipam.NIC{Name: "net1"})
	require.NoError(t, err)
	require.Equal(t, filterApp(), s.App)
}

func TestAppRefStatusName(t *testing.T) {
	require.Equal(t, "apps_v1_Deployment_default_web", ipam.AppRef{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "default", Name: "web"}.StatusName())
	require.Equal(t, "v1_ReplicationController_default_rc", ipam.AppRef{APIVersion: "v1", Kind: "ReplicationController", Namespace: "default", Name: "rc"}.StatusName())
}
