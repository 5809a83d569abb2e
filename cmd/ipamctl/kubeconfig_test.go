package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ipamkit/ipam/cmd/internal/cmdtest"
)

// withEnv runs the test with env as the environment ipamctl sees.
func withEnv(t *testing.T, env map[string]string) {
	saved := environ
	environ = func(k string) string { return env[k] }
	t.Cleanup(func() { environ = saved })
}

// TestClusterChoice pins how a command chooses between files and a
// cluster: -f reads files even when $KUBECONFIG names a cluster; without
// -f, a kubeconfig of $KUBECONFIG or ~/.kube/config is read; with neither,
// there is no input; -f with --kubeconfig or --context is a mistake.
func TestClusterChoice(t *testing.T) {
	silent := cmdtest.Kubeconfig(t, cmdtest.SilentServer(t), "")
	pools := writeTemp(t, "pools.yaml", overlapping)
	home := t.TempDir() // no .kube/config in it
	tests := []struct {
		name string
		env  map[string]string
		args []string
		code int
		want string
	}{
		{"files despite $KUBECONFIG", map[string]string{"KUBECONFIG": silent}, []string{"pools", "-f", pools}, exitProblem, "overlaps"},
		{"$KUBECONFIG without -f", map[string]string{"KUBECONFIG": silent}, []string{"pools", "--timeout", "200ms"}, exitProblem, "deadline exceeded"},
		{"$KUBECONFIG list, missing files skipped", map[string]string{"KUBECONFIG": filepath.Join(home, "none") + ":" + silent}, []string{"gc", "--timeout", "200ms"}, exitProblem, "deadline exceeded"},
		{"~/.kube/config absent", map[string]string{"HOME": home}, []string{"explain"}, exitUsage, "no input"},
		{"$KUBECONFIG of missing files", map[string]string{"KUBECONFIG": filepath.Join(home, "none")}, []string{"who", "10.0.0.1"}, exitUsage, "no input"},
		{"-f and --context", nil, []string{"explain", "-f", pools, "--context", "x"}, exitUsage, "-f and --kubeconfig or --context"},
		{"--context unknown", map[string]string{"KUBECONFIG": silent}, []string{"gc", "--context", "nosuch"}, exitProblem, `"nosuch"`},
		{"large $KUBECONFIG file", map[string]string{"KUBECONFIG": "/dev/zero"}, []string{"gc"}, exitProblem, `kubeconfig: "/dev/zero": larger than the limit of 4 MiB`},
		{"--now with $KUBECONFIG", map[string]string{"KUBECONFIG": silent}, []string{"gc", "--now", "2025-01-01T00:00:00Z"}, exitUsage, "--now and a cluster"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			withEnv(t, tt.env)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, stderr, code := runCtx(ctx, tt.args...)
			require.Equalf(t, tt.code, code, "stderr: %s", stderr)
			require.Truef(t, strings.Contains(stderr, tt.want), "stderr %q does not say %q", stderr, tt.want)
		})
	}
}
