package kubetest_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/ipamkit/ipam/k8s/kubepools"
)

// ipamctlEnv runs ipamctl with args in an environment of its own: no
// $KUBECONFIG, a HOME without a kubeconfig (so that the machine's cluster
// is never read), then env ("KEY=value"). It returns stdout, stderr and the
// exit code.
func ipamctlEnv(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(programs(t), "ipamctl"), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG=", "HOME="+t.TempDir())
	cmd.Env = append(cmd.Env, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return stdout.String(), stderr.String(), code
}

// TestIpamctlKubeconfigRules runs ipamctl pools against the in-process API
// server with client-go's kubeconfig rules, through two kubeconfig files:
//
//   - dead.kubeconfig: current-context "kubetest" (a context it does not
//     have) and a context "dead" whose server refuses connections;
//   - server.kubeconfig: the server's context "kubetest", with
//     current-context "dead" (which it does not have).
//
// Neither file alone reaches the server; $KUBECONFIG naming both merges
// them (the first file's current-context, the second's context), and
// --context picks a context over the current one.
func TestIpamctlKubeconfigRules(t *testing.T) {
	applySpider(t, kubepools.IPPoolResource, "SpiderIPPool", "kcfg-a", map[string]any{
		"ipVersion": int64(4), "subnet": "10.54.0.0/24", "ips": []any{"10.54.0.10-10.54.0.19"},
	})
	t.Cleanup(func() { deleteSpiderObjects(t, kubepools.IPPoolResource, "kcfg-a") })
	dir := t.TempDir()
	kc, err := srv.Kubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	server, err := clientcmd.Load(kc)
	if err != nil {
		t.Fatal(err)
	}
	server.CurrentContext = "dead"
	dead := clientcmdapi.NewConfig()
	dead.Clusters["dead"] = &clientcmdapi.Cluster{Server: "http://127.0.0.1:1"}
	dead.AuthInfos["dead"] = &clientcmdapi.AuthInfo{}
	dead.Contexts["dead"] = &clientcmdapi.Context{Cluster: "dead", AuthInfo: "dead"}
	dead.CurrentContext = "kubetest"
	serverFile, deadFile := filepath.Join(dir, "server.kubeconfig"), filepath.Join(dir, "dead.kubeconfig")
	for path, cfg := range map[string]*clientcmdapi.Config{serverFile: server, deadFile: dead} {
		if err := clientcmd.WriteToFile(*cfg, path); err != nil {
			t.Fatal(err)
		}
	}
	both := "KUBECONFIG=" + deadFile + string(os.PathListSeparator) + serverFile
	tests := []struct {
		name string
		env  []string
		args []string
		ok   bool
	}{
		{"$KUBECONFIG merges two files", []string{both}, nil, true},
		{"$KUBECONFIG of the server's file alone: its current context is missing", []string{"KUBECONFIG=" + serverFile}, nil, false},
		{"$KUBECONFIG of the other file alone: no context kubetest", []string{"KUBECONFIG=" + deadFile}, nil, false},
		{"--context picks the server's context", []string{"KUBECONFIG=" + serverFile}, []string{"--context", "kubetest"}, true},
		{"--context over the merged current context", []string{both}, []string{"--context", "dead"}, false},
		{"--kubeconfig and --context", nil, []string{"--kubeconfig", serverFile, "--context", "kubetest"}, true},
		{"--kubeconfig over $KUBECONFIG", []string{both}, []string{"--kubeconfig", serverFile}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stdout, stderr, code := ipamctlEnv(t, tt.env, append([]string{"pools", "--quiet"}, tt.args...)...)
			found := strings.Contains(stdout, "kcfg-a ")
			if tt.ok && (code != 0 || !found) {
				t.Fatalf("exit %d, want 0 and pool kcfg-a listed\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
			}
			if !tt.ok && (code == 0 || found) {
				t.Fatalf("exit %d, want the server not reached\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
			}
		})
	}
}
