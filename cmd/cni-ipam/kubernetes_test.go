//go:build kubernetes

package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/stretchr/testify/require"

	"github.com/ipamkit/ipam/cmd/internal/cmdtest"
)

// These tests need the plugin built with -tags kubernetes; they run it in
// the test process (go test -tags kubernetes ./cmd/cni-ipam). Against a
// real API server it is tested in k8s/kubetest.

// kubeConf is a network config of a kubernetes section with kubeconfig and
// the section's other fields extra.
func kubeConf(kubeconfig, extra string) []byte {
	return fmt.Appendf(nil, `{"cniVersion": "1.1.0", "name": "kube", "type": "cni-ipam",
		"ipam": {"kubernetes": {"kubeconfig": %q%s}, "default_ipv4_ippool": ["a"]}}`, kubeconfig, extra)
}

// inCluster returns a plugin whose every call has the deadline timeout, and
// what it writes on stderr.
func inCluster(timeout time.Duration) (*plugin, *bytes.Buffer) {
	var out, warn bytes.Buffer
	return &plugin{open: openState, stdout: &out, warn: &warn, timeout: timeout}, &warn
}

// TestKubernetesUnresponsive (issue 26, case 9): against an API server that
// accepts and never answers, every call ends after the section's timeout
// with code 11 (STATUS: 50), not after the call's 100 s; STATUS waits at
// most 5 s whatever the timeout. The plugin's own deadline here is a
// minute: a call that waits for it fails the test.
func TestKubernetesUnresponsive(t *testing.T) {
	t.Parallel()
	kc := cmdtest.Kubeconfig(t, cmdtest.SilentServer(t), "")
	conf := kubeConf(kc, `, "timeout": "300ms"`)
	p, _ := inCluster(time.Minute)
	args := &skel.CmdArgs{ContainerID: "c1", IfName: "eth0", Args: "K8S_POD_NAMESPACE=default;K8S_POD_NAME=p", StdinData: conf}
	for name, cmd := range map[string]func(*skel.CmdArgs) error{"ADD": p.cmdAdd, "DEL": p.cmdDel, "CHECK": p.cmdCheck} {
		start := time.Now()
		te := cniCode(t, cmd(args))
		require.Equalf(t, types.ErrTryAgainLater, te.Code, "%s: %+v", name, te)
		require.Containsf(t, te.Msg, "ipam.kubernetes: the API server did not answer within 300ms", "%s", name)
		require.Lessf(t, time.Since(start), time.Minute, "%s waited for the call's deadline", name)
	}
	te := cniCode(t, p.cmdStatus(args))
	require.Equal(t, types.ErrPluginNotAvailable, te.Code, "%+v", te)

	// The defaults: 20 s for a call, 5 s for STATUS.
	d, err := kubernetesTimeout(kubeConfSection(t, kubeConf(kc, "")))
	require.NoError(t, err)
	require.Equal(t, 20*time.Second, d)
	require.Less(t, statusTimeout, defaultKubernetesTimeout)

	for _, bad := range []string{`"0s"`, `"-1s"`, `"soon"`} {
		te := cniCode(t, p.cmdAdd(&skel.CmdArgs{ContainerID: "c1", IfName: "eth0", Args: args.Args, StdinData: kubeConf(kc, `, "timeout": `+bad)}))
		require.Equalf(t, types.ErrInvalidNetworkConfig, te.Code, "timeout %s: %+v", bad, te)
		require.Contains(t, te.Msg, "ipam.kubernetes: timeout "+bad+": want a positive duration")
	}
}

// kubeConfSection returns the ipam.kubernetes section of conf.
func kubeConfSection(t *testing.T, conf []byte) []byte {
	t.Helper()
	c, err := loadConfig(conf, "")
	require.NoError(t, err)
	return c.Kubernetes
}

// TestKubernetesPodArgsMissing (issue 26, case 9): an ADD whose CNI_ARGS
// do not name the pod is a configuration error (code 4, CNI_ARGS is an
// environment variable) found before the cluster is asked anything: with
// an API server that never answers, it is not code 11 after a deadline.
func TestKubernetesPodArgsMissing(t *testing.T) {
	t.Parallel()
	kc := cmdtest.Kubeconfig(t, cmdtest.SilentServer(t), "")
	p, _ := inCluster(time.Minute)
	for _, cniArgs := range []string{"", "K8S_POD_NAMESPACE=default", "K8S_POD_NAME=p", "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME="} {
		te := cniCode(t, p.cmdAdd(&skel.CmdArgs{ContainerID: "c1", IfName: "eth0", Args: cniArgs, StdinData: kubeConf(kc, "")}))
		require.Equalf(t, types.ErrInvalidEnvironmentVariables, te.Code, "CNI_ARGS %q: %+v", cniArgs, te)
		require.Containsf(t, te.Msg, "CNI_ARGS: K8S_POD_NAMESPACE and K8S_POD_NAME are needed with ipam.kubernetes", "CNI_ARGS %q", cniArgs)
	}
}

// TestKubernetesKubeconfigSizeLimited (issue 26, case 8): the kubeconfig,
// and the files it names, are read up to 4 MiB: a larger one is a
// configuration error naming ipam.kubernetes.kubeconfig and the file.
func TestKubernetesKubeconfigSizeLimited(t *testing.T) {
	t.Parallel()
	big := cmdtest.BigFile(t, 64<<20)
	p, _ := inCluster(time.Minute)
	args := "K8S_POD_NAMESPACE=default;K8S_POD_NAME=p"
	for kubeconfig, want := range map[string]string{
		big: fmt.Sprintf("ipam.kubernetes.kubeconfig %q: larger than the limit of 4 MiB", big),
		cmdtest.Kubeconfig(t, "127.0.0.1:1", "client-certificate: "+big+", client-key: "+big): fmt.Sprintf(`users["u"]: file %q: larger than the limit of 4 MiB`, big),
		cmdtest.Kubeconfig(t, "127.0.0.1:1", "tokenFile: "+big):                               fmt.Sprintf(`users["u"]: file %q: larger than the limit of 4 MiB`, big),
	} {
		conf := kubeConf(kubeconfig, "")
		for name, cmd := range map[string]func(*skel.CmdArgs) error{"ADD": p.cmdAdd, "STATUS": p.cmdStatus} {
			te := cniCode(t, cmd(&skel.CmdArgs{ContainerID: "c1", IfName: "eth0", Args: args, StdinData: conf}))
			require.Equalf(t, types.ErrInvalidNetworkConfig, te.Code, "%s: %+v", name, te)
			require.Containsf(t, te.Msg, want, "%s", name)
			require.Truef(t, strings.HasPrefix(te.Msg, "ipam.kubernetes.kubeconfig "), "%s: %q", name, te.Msg)
		}
	}
}

// TestKubernetesGCReleasesNothing: GC with a kubernetes section releases
// nothing, asks the cluster nothing (its API server here never answers),
// and says why on stderr.
func TestKubernetesGCReleasesNothing(t *testing.T) {
	t.Parallel()
	kc := cmdtest.Kubeconfig(t, cmdtest.SilentServer(t), "")
	p, warn := inCluster(time.Minute)
	conf := bytes.Replace(kubeConf(kc, ""), []byte(`"ipam"`), []byte(`"cni.dev/valid-attachments": [], "ipam"`), 1)
	require.NoError(t, p.cmdGC(&skel.CmdArgs{StdinData: conf}))
	require.Contains(t, warn.String(), `cni-ipam: GC of network "kube": nothing released: the claims in ipam.kubernetes are every node's`)
}
