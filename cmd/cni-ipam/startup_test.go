package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The plugin starts once per CNI call, so what its packages do at start-up is
// paid on every ADD and DEL. These tests keep heavy packages out of its
// import graph, and pin what their initialisation allocates.

// TestImportGraph: the plugin imports the standard library, the CNI library
// and this repository's core, nothing else; and of the standard library,
// nothing that serves or fetches over a network or renders templates.
func TestImportGraph(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	require.NoError(t, err)
	allowed := []string{
		"github.com/ipamkit/ipam",
		"github.com/containernetworking/cni/",
		"github.com/vishvananda/netns", // the CNI library's ns package
		"golang.org/x/sys/",
		"go4.org/netipx",
		"golang.org/x/exp/",
	}
	banned := []string{"net/http", "crypto/tls", "text/template", "html/template", "os/exec"}
	for _, pkg := range strings.Fields(string(out)) {
		first, _, _ := strings.Cut(pkg, "/")
		std := !strings.Contains(first, ".")
		switch {
		case std && !strings.HasPrefix(pkg, "vendor/"):
			require.NotContains(t, banned, pkg, "the plugin imports a heavy standard package")
		case std:
		default:
			ok := false
			for _, a := range allowed {
				ok = ok || strings.HasPrefix(pkg, a)
			}
			require.Truef(t, ok, "the plugin imports %s: keep other modules out of a binary that starts per call", pkg)
		}
	}
}

// TestInitCost: the packages' initialisation, as GODEBUG=inittrace=1 reports
// it when the binary starts, allocates little (about 30 KB when this was
// written; a Kubernetes client's scheme registration alone takes megabytes).
func TestInitCost(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(filepath.Join(pluginDir, pluginType))
	cmd.Env = append(os.Environ(), "GODEBUG=inittrace=1", "CNI_COMMAND=VERSION")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Run())
	var bytesTotal, allocs, pkgs int
	sc := bufio.NewScanner(&stderr)
	for sc.Scan() {
		// init <package> @<t> ms, <clock> ms clock, <bytes> bytes, <n> allocs
		f := strings.Fields(sc.Text())
		if len(f) != 11 || f[0] != "init" {
			continue
		}
		b, err1 := strconv.Atoi(f[7])
		n, err2 := strconv.Atoi(f[9])
		require.NoError(t, err1)
		require.NoError(t, err2)
		bytesTotal, allocs, pkgs = bytesTotal+b, allocs+n, pkgs+1
	}
	require.NotZero(t, pkgs, "no inittrace output: %s", stderr.String())
	t.Logf("%d packages initialised: %d bytes in %d allocations", pkgs, bytesTotal, allocs)
	require.Less(t, bytesTotal, 256<<10, "bytes allocated by package initialisation")
	require.Less(t, allocs, 2000, "allocations by package initialisation")
}
