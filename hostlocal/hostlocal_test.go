package hostlocal_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/hostlocal"
)

// TestLoadLongNetworkName: host-local accepts any network name that fits in a
// directory name (255 bytes); so does Load, and its pools make a catalog. Two
// long names that differ only at the end give different pool names.
func TestLoadLongNetworkName(t *testing.T) {
	seen := map[string]int{}
	for n := 240; n <= 255; n++ {
		for _, last := range []string{"a", "b"} {
			name := strings.Repeat("n", n-1) + last
			conf := fmt.Sprintf(`{"cniVersion": "1.0.0", "name": %q, "ipam": {"ranges": [[{"subnet": "10.0.0.0/24"}], [{"subnet": "10.1.0.0/24"}]]}}`, name)
			c, err := hostlocal.Load([]byte(conf), "")
			require.NoErrorf(t, err, "network name of %d characters", n)
			require.Equal(t, name, c.Name)
			_, err = ipam.NewCatalog(c.Pools...)
			require.NoErrorf(t, err, "network name of %d characters", n)
			for i, p := range c.Pools {
				require.Equal(t, hostlocal.PoolName(name, i), p.Name)
				require.NotContainsf(t, seen, p.Name, "pool name of network %d%s/%d", n, last, i)
				seen[p.Name] = n
			}
		}
	}
	require.Equal(t, "net/3", hostlocal.PoolName("net", 3), "a name that fits is kept whole")
}

// TestLoadRangeErrorNamesNoPool: a bad range set is reported by its index, as
// host-local does, without the name of a pool the user never wrote.
func TestLoadRangeErrorNamesNoPool(t *testing.T) {
	for _, ranges := range []string{
		`[[{"subnet": "10.0.0.0/31"}]]`,
		`[[{"subnet": "10.0.0.0/24", "rangeStart": "10.0.1.1"}]]`,
		`[[{"subnet": "10.0.0.0/24"}, {"subnet": "10.0.0.0/25"}]]`,
	} {
		_, err := hostlocal.Load([]byte(`{"cniVersion": "1.0.0", "name": "net", "ipam": {"ranges": `+ranges+`}}`), "")
		require.Error(t, err)
		require.ErrorIs(t, err, ipam.ErrInvalid)
		require.Contains(t, err.Error(), "invalid range set 0: ranges[")
		require.NotContainsf(t, err.Error(), "net/0", "ranges %s", ranges)
	}
}
