package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestConcurrentAdds runs many plugin processes at once on one state
// directory: each gets its own address, and the directory records each once.
func TestConcurrentAdds(t *testing.T) {
	t.Parallel()
	const n = 16
	dataDir := t.TempDir()
	conf := netconf(t, `{"cniVersion": "1.0.0", "name": "busy", "ipam": {"ranges": [[{"subnet": "10.60.0.0/27"}]]}}`, dataDir)
	var wg sync.WaitGroup
	got := make([][]string, n)
	for i := range n {
		wg.Go(func() {
			out, cerr, err := call{Command: "ADD", ContainerID: fmt.Sprintf("c%d", i), IfName: "eth0", Config: conf}.run()
			if err == nil && cerr != nil {
				err = cerr
			}
			var r addResult
			if err == nil {
				err = json.Unmarshal(out, &r)
			}
			if err != nil {
				t.Errorf("ADD c%d: %v", i, err)
				return
			}
			got[i] = r.addresses()
		})
	}
	wg.Wait()
	seen := map[string]string{}
	for i, a := range got {
		require.Lenf(t, a, 1, "c%d", i)
		require.NotContainsf(t, seen, a[0], "c%d and %s got the same address", i, seen[a[0]])
		seen[a[0]] = fmt.Sprintf("c%d", i)
	}
	allocs, _ := stateDir(t, filepath.Join(dataDir, "busy"))
	require.Len(t, allocs, n)
}
