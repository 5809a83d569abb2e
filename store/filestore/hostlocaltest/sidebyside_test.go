//go:build linux

package hostlocaltest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ipamkit/ipam/store"
	"github.com/ipamkit/ipam/store/filestore"
)

// hostLocal is the host-local v1.9.1 binary, built once by TestMain from the
// module this go.mod requires (its tool directive).
var hostLocal string

func TestMain(m *testing.M) {
	os.Exit(func() int {
		dir, err := os.MkdirTemp("", "host-local-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		hostLocal = filepath.Join(dir, "host-local")
		build := exec.Command("go", "build", "-o", hostLocal, "github.com/containernetworking/plugins/plugins/ipam/host-local")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "building host-local:", err)
			return 1
		}
		return m.Run()
	}())
}

// network is the network of the tests: one IPv4 and one IPv6 range set, as
// the filestore's pools net/0 and net/1.
const network = "hlnet"

var pools = []filestore.Pool{
	{Name: "net/0", Index: 0, Prefixes: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}},
	{Name: "net/1", Index: 1, Prefixes: []netip.Prefix{netip.MustParsePrefix("2001:db8:1::/64")}},
}

// call runs host-local for command (ADD, DEL, CHECK) on container id's
// interface ifname, with its state in dataDir. It returns the addresses
// of an ADD's result, or the CNI error message.
func call(t *testing.T, dataDir, command, id, ifname string) ([]netip.Addr, string) {
	t.Helper()
	conf := fmt.Sprintf(`{"cniVersion": "1.0.0", "name": %q, "type": "bridge",
		"ipam": {"type": "host-local", "dataDir": %q,
			"ranges": [[{"subnet": "10.1.0.0/16"}], [{"subnet": "2001:db8:1::/64"}]]}}`, network, dataDir)
	cmd := exec.Command(hostLocal)
	cmd.Env = append(os.Environ(), "CNI_COMMAND="+command, "CNI_CONTAINERID="+id, "CNI_NETNS=/var/run/netns/none",
		"CNI_IFNAME="+ifname, "CNI_PATH="+filepath.Dir(hostLocal))
	cmd.Stdin = strings.NewReader(conf)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		var cniErr struct{ Msg string }
		if json.Unmarshal(stdout.Bytes(), &cniErr) != nil || cniErr.Msg == "" {
			t.Fatalf("host-local %s %s %s: %v\nstdout: %s\nstderr: %s", command, id, ifname, err, stdout.Bytes(), stderr.Bytes())
		}
		return nil, cniErr.Msg
	}
	var result struct{ IPs []struct{ Address string } }
	if command == "ADD" {
		require.NoError(t, json.Unmarshal(stdout.Bytes(), &result), "host-local's result %s", stdout.Bytes())
	}
	var ips []netip.Addr
	for _, ip := range result.IPs {
		ips = append(ips, netip.MustParsePrefix(ip.Address).Addr())
	}
	return ips, ""
}

// open opens the network directory under dataDir, logging to the test.
func open(t *testing.T, dataDir string) *filestore.Store {
	t.Helper()
	s, err := filestore.Open(filepath.Join(dataDir, network), filestore.Options{Pools: pools,
		Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

// ips returns the addresses of claims, sorted.
func ips(claims []store.Claim) []netip.Addr {
	var out []netip.Addr
	for _, c := range claims {
		out = append(out, c.IP)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// owned returns the addresses Owned finds for container id (on ifname, if
// not empty).
func owned(t *testing.T, s *filestore.Store, id, ifname string) []netip.Addr {
	t.Helper()
	q := store.ByContainer(id)
	if ifname != "" {
		q = q.On(ifname)
	}
	cs, err := s.Owned(t.Context(), q)
	require.NoError(t, err)
	return ips(cs)
}

// hostLocalNames matches the names host-local gives the files of a network
// directory.
var hostLocalNames = regexp.MustCompile(`^([0-9.]+|[0-9a-f:]+|last_reserved_ip\.\d+|lock)$`)

// TestSideBySide has host-local and the filestore allocate, refuse and
// release on one directory, each right after the other: every address
// host-local reserves is found at once by Owned and stops CreateExclusive,
// every one it releases is gone; host-local finds the filestore's claims
// (its duplicate check refuses the container) and releases them; and no file
// of the owner index is ever inside the directory host-local reads.
func TestSideBySide(t *testing.T) {
	dataDir := t.TempDir()
	call(t, dataDir, "ADD", "warmup", "eth0") // host-local makes the directory
	s, other := open(t, dataDir), open(t, dataDir)
	ctx := t.Context()

	for i := range 30 {
		theirs, ours := fmt.Sprintf("hl-%d", i), fmt.Sprintf("fs-%d", i)

		// host-local's ADD: found at once, by both Stores, and held.
		got, msg := call(t, dataDir, "ADD", theirs, "eth0")
		require.Empty(t, msg)
		slices.SortFunc(got, netip.Addr.Compare)
		if o := owned(t, other, theirs, "eth0"); !slices.Equal(o, got) {
			t.Fatalf("host-local gave %s %v; Owned finds %v", theirs, got, o)
		}
		_, err := s.CreateExclusive(ctx, store.Claim{Pool: "net/0", IP: netip.AddrFrom4([4]byte{10, 1, 200, byte(i)}),
			Owner: store.Owner{ContainerID: theirs, Interface: "eth0"}})
		require.ErrorIs(t, err, store.ErrHeld, "CreateExclusive for a container host-local served")
		if o := owned(t, s, theirs, "net1"); len(o) != 0 {
			t.Fatalf("Owned(%s on net1) = %v, want none", theirs, o)
		}

		// The filestore's claim (below the cursor it sets, from which
		// host-local goes on upwards): host-local's duplicate check sees it.
		c, err := s.CreateExclusive(ctx, store.Claim{Pool: "net/0", IP: netip.AddrFrom4([4]byte{10, 1, 255, byte(200 - i)}),
			Owner: store.Owner{ContainerID: ours, Interface: "eth0"}})
		require.NoError(t, err)
		_, msg = call(t, dataDir, "ADD", ours, "eth0")
		if want := fmt.Sprintf("%s has been allocated to %s, duplicate allocation is not allowed", c.IP, ours); !strings.Contains(msg, want) {
			t.Fatalf("host-local ADD of a container the filestore served: %q, want %q", msg, want)
		}
		_, msg = call(t, dataDir, "CHECK", ours, "eth0")
		require.Empty(t, msg, "host-local CHECK of the filestore's claim")

		// host-local releases the filestore's claim, and its own every other
		// round: gone at once.
		_, msg = call(t, dataDir, "DEL", ours, "eth0")
		require.Empty(t, msg)
		if o := owned(t, other, ours, ""); len(o) != 0 {
			t.Fatalf("Owned(%s) after host-local's DEL = %v", ours, o)
		}
		if i%2 == 1 {
			_, msg = call(t, dataDir, "DEL", theirs, "eth0")
			require.Empty(t, msg)
			if o := owned(t, s, theirs, ""); len(o) != 0 {
				t.Fatalf("Owned(%s) after host-local's DEL = %v", theirs, o)
			}
		}
	}

	// host-local reads the whole directory on every call: nothing in it is
	// the filestore's.
	err := filepath.WalkDir(filepath.Join(dataDir, network), func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if !hostLocalNames.MatchString(d.Name()) {
			t.Errorf("%s in the network directory is not a host-local file", path)
		}
		return nil
	})
	require.NoError(t, err)
	idx, err := os.Readlink(filepath.Join(dataDir, ".ipam-owners", network, ".state"))
	require.NoError(t, err, "the owner index, next to the network directory")
	require.Contains(t, idx, "ipam-owner-index/1")

	// Every container's claims, as List has them, are what Owned says.
	held := map[string][]store.Claim{}
	for _, p := range pools {
		cs, err := s.List(ctx, p.Name)
		require.NoError(t, err)
		for _, c := range cs {
			held[c.Owner.ContainerID] = append(held[c.Owner.ContainerID], c)
		}
	}
	for i := range 30 {
		for _, id := range []string{fmt.Sprintf("hl-%d", i), fmt.Sprintf("fs-%d", i)} {
			if o := owned(t, s, id, ""); !slices.Equal(o, ips(held[id])) {
				t.Errorf("Owned(%s) = %v, List holds %v", id, o, ips(held[id]))
			}
		}
	}
}
