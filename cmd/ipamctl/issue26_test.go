package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ipamkit/ipam/cmd/internal/cmdtest"
)

// runCtx is runCmd within ctx.
func runCtx(ctx context.Context, args ...string) (stdout, stderr string, code int) {
	var out, errOut bytes.Buffer
	code = run(ctx, args, strings.NewReader(""), &out, &errOut, fixedClock)
	return out.String(), errOut.String(), code
}

// TestTimeoutMustBePositive (issue 26, case 7): --timeout 0s or -1s
// against a server that never answers is refused as a usage error, instead
// of waiting forever; a positive one ends the command with a problem. The
// test gives run a deadline of its own, so that a command that ignores
// --timeout fails the test instead of hanging it.
func TestTimeoutMustBePositive(t *testing.T) {
	kubeconfig := cmdtest.Kubeconfig(t, cmdtest.SilentServer(t), "")
	for _, cmd := range []string{"explain", "gc"} {
		for _, timeout := range []string{"0s", "-1s"} {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			_, stderr, code := runCtx(ctx, cmd, "--kubeconfig", kubeconfig, "--timeout", timeout)
			cancel()
			require.Equalf(t, exitUsage, code, "%s --timeout %s: %s", cmd, timeout, stderr)
			require.Contains(t, stderr, "--timeout "+strings.TrimSuffix(timeout, "s")+"s: want a positive duration")
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		_, stderr, code := runCtx(ctx, cmd, "--kubeconfig", kubeconfig, "--timeout", "200ms")
		require.NoErrorf(t, ctx.Err(), "%s --timeout 200ms waited for the test's deadline", cmd)
		cancel()
		require.Equalf(t, exitProblem, code, "%s --timeout 200ms: %s", cmd, stderr)
		require.Contains(t, stderr, "deadline exceeded")
	}
}

// TestFilesAreSizeLimited (issue 26, case 8): --kubeconfig and
// --cni-config, and the files a kubeconfig names, are read up to 4 MiB;
// a larger file (/dev/zero, which never ends) is an error that names the
// flag and the file.
func TestFilesAreSizeLimited(t *testing.T) {
	big := cmdtest.BigFile(t, 64<<20)
	pools := writeTemp(t, "pools.yaml", overlapping)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"kubeconfig", []string{"explain", "--kubeconfig", big}, fmt.Sprintf("--kubeconfig %q: larger than the limit of 4 MiB", big)},
		{"kubeconfig /dev/zero", []string{"gc", "--kubeconfig", "/dev/zero"}, `--kubeconfig "/dev/zero": larger than the limit of 4 MiB`},
		{"client-key", []string{"explain", "--kubeconfig", cmdtest.Kubeconfig(t, "127.0.0.1:1", `client-certificate: `+big+`, client-key: `+big)},
			`users["u"]: file "` + big + `": larger than the limit of 4 MiB`},
		{"cni-config", []string{"explain", "-f", pools, "--cni-config", big}, "--cni-config: " + big + ": larger than the limit of 4 MiB"},
		{"cni-config /dev/zero", []string{"explain", "-f", pools, "--cni-config", "/dev/zero"}, "--cni-config: /dev/zero: larger than the limit of 4 MiB"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, stderr, code := runCmd(t, tt.args...)
			require.Equalf(t, exitProblem, code, "%s", stderr)
			require.Contains(t, stderr, tt.want)
		})
	}
}

// TestListWithTwoItemsKeys (issue 26, case 10): a List with two items keys
// is refused, naming both lines, in YAML and in JSON alike (YAML's reader
// took the first, JSON's both).
func TestListWithTwoItemsKeys(t *testing.T) {
	pool := func(name, net string) string {
		return fmt.Sprintf(`{"apiVersion": "spiderpool.spidernet.io/v2beta1", "kind": "SpiderIPPool", "metadata": {"name": %q}, "spec": {"subnet": "%s.0/24", "ips": ["%s.2-%s.9"]}}`, name, net, net, net)
	}
	yamlDoc := "apiVersion: v1\nkind: List\nitems:\n- " + pool("first", "10.1.0") + "\nitems:\n- " + pool("second", "10.2.0") + "\n"
	jsonDoc := `{"apiVersion": "v1", "kind": "List",` + "\n" + `"items": [` + pool("first", "10.1.0") + "],\n" + `"items": [` + pool("second", "10.2.0") + "]}\n"
	flowDoc := "apiVersion: v1\nkind: List\nitems: [" + pool("first", "10.1.0") + "]\nitems:\n- " + pool("second", "10.2.0") + "\n"
	nullDoc := `{"apiVersion": "v1", "kind": "List",` + "\n" + `"items": null,` + "\n" + `"items": [` + pool("second", "10.2.0") + "]}\n"
	for name, doc := range map[string]string{"list.yaml": yamlDoc, "list.json": jsonDoc, "flow.yaml": flowDoc, "null.json": nullDoc} {
		path := writeTemp(t, name, doc)
		stdout, stderr, code := runCmd(t, "validate", "-f", path)
		require.Equalf(t, exitProblem, code, "%s: %s%s", name, stdout, stderr)
		lines := "3 and 5"
		if name == "list.json" || name == "null.json" {
			lines = "2 and 3"
		} else if name == "flow.yaml" {
			lines = "3 and 4"
		}
		require.Containsf(t, stdout+stderr, path+":1: document 1: items: given twice, on lines "+lines, "%s", name)
	}
}

// TestReplicasOutOfRange (issue 26, case 10): an integer too large for its
// field is out of range, not of the wrong type.
func TestReplicasOutOfRange(t *testing.T) {
	for value, want := range map[string]string{
		"2147483648":  "spec.replicas: 2147483648: out of range: an integer from -2147483648 to 2147483647 is wanted",
		"-2147483649": "spec.replicas: -2147483649: out of range: an integer from -2147483648 to 2147483647 is wanted",
		"1.5":         "spec.replicas: wrong type: a JSON number 1.5 where an integer is wanted",
		`"two"`:       "spec.replicas: wrong type: a JSON string where an integer is wanted",
	} {
		path := writeTemp(t, "sts.yaml", "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: s, namespace: default}\nspec: {replicas: "+value+"}\n")
		stdout, stderr, code := runCmd(t, "validate", "-f", path)
		require.Equalf(t, exitProblem, code, "%s%s", stdout, stderr)
		require.Contains(t, stdout+stderr, want)
	}
}

// TestExplainWithoutPods (issue 26, case 10): explain of an input without
// pods says so on stderr, as kubectl says "No resources found", instead of
// printing nothing; like kubectl, it succeeds.
func TestExplainWithoutPods(t *testing.T) {
	path := writeTemp(t, "pools.yaml", overlapping[:strings.Index(overlapping, "\n---")])
	for _, o := range []string{"table", "json"} {
		stdout, stderr, code := runCmd(t, "explain", "-f", path, "-o", o)
		require.Equalf(t, exitOK, code, "%s%s", stdout, stderr)
		require.Equal(t, "ipamctl explain: no pods in the input: nothing to explain\n", stderr)
	}
}
