//go:build linux

package filestore_test

import (
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ipamkit/ipam/store"
	"github.com/ipamkit/ipam/store/storetest"
)

func TestCount(t *testing.T) {
	dir := t.TempDir()
	addrs := []netip.Addr{netip.MustParseAddr("10.1.2.2"), netip.MustParseAddr("10.1.2.3"), netip.MustParseAddr("10.1.2.250")}
	storetest.RunCount(t, func() store.Store { return open(t, dir, false) }, "net/0", addrs)

	// Corrupt files hold their addresses: Count counts them, as List
	// reports them; files of another pool and other names are not claims.
	s := open(t, dir, false)
	ctx := t.Context()
	_, err := s.Create(ctx, ctrClaim("net/0", "10.1.2.2", "good", "eth0"))
	require.NoError(t, err)
	_, err = s.Create(ctx, ctrClaim("net/1", "2001:db8:1::2", "good", "eth0"))
	require.NoError(t, err)
	for name, body := range map[string]string{"10.1.2.10": "", "10.1.2.11": "a\r\nb\r\nc", "notes": "x", "10.9.9.9": "x\r\neth0"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600))
	}
	n, err := s.Count(ctx, "net/0")
	require.NoError(t, err)
	require.Equal(t, 3, n, "one claim and two corrupt files")
	n, err = s.Count(ctx, "net/1")
	require.NoError(t, err)
	require.Equal(t, 1, n)
}
