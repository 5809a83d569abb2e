package etcdtest_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ipamkit/ipam/store"
)

// The CNI plugin (cmd/cni-ipam) built with -tags etcd, once per test
// binary.
var (
	pluginOnce sync.Once
	pluginBin  string
	pluginErr  error
)

// etcdPlugin returns the path of the plugin built with etcd support.
func etcdPlugin(t *testing.T) string {
	t.Helper()
	pluginOnce.Do(func() {
		dir, err := os.MkdirTemp("", "cni-ipam-etcd-")
		if err != nil {
			pluginErr = err
			return
		}
		pluginBin = filepath.Join(dir, "cni-ipam")
		out, err := exec.Command("go", "build", "-tags", "etcd", "-o", pluginBin, "github.com/ipamkit/ipam/cmd/cni-ipam").CombinedOutput()
		if err != nil {
			pluginErr = fmt.Errorf("go build -tags etcd cmd/cni-ipam: %v\n%s", err, out)
		}
	})
	if pluginErr != nil {
		t.Fatal(pluginErr)
	}
	return pluginBin
}

// removePlugin removes the plugin built for the tests, if any.
func removePlugin() {
	if pluginBin != "" {
		os.RemoveAll(filepath.Dir(pluginBin))
	}
}

// cniResult is what the plugin prints: a result or an error.
type cniResult struct {
	IPs []struct {
		Address string `json:"address"`
	} `json:"ips"`
	Code uint   `json:"code"`
	Msg  string `json:"msg"`
}

// cni runs the plugin for command on container id with conf.
func cni(t *testing.T, bin, command, id, conf string, env ...string) cniResult {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "CNI_COMMAND="+command, "CNI_CONTAINERID="+id,
		"CNI_NETNS=/var/run/netns/etcdtest", "CNI_IFNAME=eth0", "CNI_PATH="+filepath.Dir(bin))
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdin = strings.NewReader(conf)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var r cniResult
	if stdout.Len() > 0 {
		if jerr := json.Unmarshal(stdout.Bytes(), &r); jerr != nil {
			t.Fatalf("%s %s: stdout %q: %v (stderr %q)", command, id, stdout.String(), jerr, stderr.String())
		}
	}
	if err != nil && r.Code == 0 {
		t.Fatalf("%s %s: %v (stdout %q, stderr %q)", command, id, err, stdout.String(), stderr.String())
	}
	return r
}

// pluginConf is a network config whose claims live in etcd at endpoint
// under prefix.
func pluginConf(name, subnet, prefix, etcdExtra string, endpoints ...string) string {
	eps, _ := json.Marshal(endpoints)
	return fmt.Sprintf(`{"cniVersion": "1.1.0", "name": %q, "type": "bridge", "ipam": {"type": "cni-ipam",
		"ranges": [[{"subnet": %q}]], "etcd": {"endpoints": %s, "prefix": %q%s}}}`, name, subnet, eps, prefix, etcdExtra)
}

// The plugin, given an ipam.etcd section, keeps the network's claims in
// etcd: two containers get two addresses, recorded under the network's
// name; DEL releases; STATUS is ready. Without a quorum, ADD fails with
// code 11 (try again later) and STATUS with code 50 (not available).
func TestPluginOverEtcd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the plugin")
	}
	bin := etcdPlugin(t)
	prefix := newPrefix(t)
	conf := pluginConf("etcdnet", "10.77.0.0/24", prefix, "", single.Endpoints()...)
	s := open(t, single, prefix+"etcdnet/")

	for i, id := range []string{"c1", "c2"} {
		r := cni(t, bin, "ADD", id, conf)
		want := fmt.Sprintf("10.77.0.%d/24", i+2)
		if r.Code != 0 || len(r.IPs) != 1 || r.IPs[0].Address != want {
			t.Fatalf("ADD %s = %+v, want %s", id, r, want)
		}
		owned, err := s.Owned(t.Context(), store.ByContainer(id))
		if err != nil || len(owned) != 1 || owned[0].IP != netip.MustParsePrefix(want).Addr() || owned[0].Owner.Interface != "eth0" {
			t.Fatalf("the Store has for container %s: %v, %v; want its claim of %s on eth0", id, owned, err, want)
		}
	}
	if r := cni(t, bin, "STATUS", "", conf); r.Code != 0 {
		t.Errorf("STATUS = %+v, want ready", r)
	}
	if r := cni(t, bin, "DEL", "c1", conf); r.Code != 0 {
		t.Fatalf("DEL c1 = %+v", r)
	}
	if owned, err := s.Owned(t.Context(), store.ByContainer("c1")); err != nil || len(owned) != 0 {
		t.Errorf("the Store has for container c1 after DEL: %v, %v; want nothing", owned, err)
	}

	// Without a reachable member: code 11 within the section's timeout,
	// and STATUS says not available.
	p := newProxy(t, single.Members[0].ClientURL()[len("http://"):])
	p.Cut()
	down := pluginConf("etcdnet", "10.77.0.0/24", prefix, `, "timeout": "500ms"`, "http://"+p.Addr())
	// A VERSION, which does not reach etcd, times the plugin's start on
	// this machine as loaded as it is now. An ADD that ignored the
	// section's timeout would wait etcdstore's default of 5 s: the bound
	// is the start and 4 s.
	start := time.Now()
	cni(t, bin, "VERSION", "", down)
	startup := time.Since(start)
	start = time.Now()
	r := cni(t, bin, "ADD", "c3", down)
	if took := time.Since(start); r.Code != 11 || took > startup+4*time.Second {
		t.Errorf("ADD without etcd = %+v after %s (a VERSION took %s), want code 11 in about the timeout", r, took, startup)
	}
	if !strings.Contains(r.Msg, "etcd unavailable") {
		t.Errorf("ADD without etcd: %q does not say etcd is unavailable", r.Msg)
	}
	if r := cni(t, bin, "STATUS", "", down); r.Code != 50 {
		t.Errorf("STATUS without etcd = %+v, want code 50", r)
	}

	// A bad section is a configuration error naming the field.
	bad := pluginConf("etcdnet", "10.77.0.0/24", prefix, `, "timeout": "soon"`, single.Endpoints()...)
	if r := cni(t, bin, "ADD", "c4", bad); r.Code != 6 && r.Code != 7 || !strings.Contains(r.Msg, `"soon"`) {
		t.Errorf("ADD with a bad timeout = %+v, want code 6 or 7 naming it", r)
	}

	// What a start of the plugin costs with the etcd client linked in.
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "GODEBUG=inittrace=1", "CNI_COMMAND=VERSION")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	var pkgs, bytesTotal int
	for _, line := range strings.Split(stderr.String(), "\n") {
		var name string
		var at, clock float64
		var b, n int
		if _, err := fmt.Sscanf(line, "init %s @%f ms, %f ms clock, %d bytes, %d allocs", &name, &at, &clock, &b, &n); err == nil {
			pkgs, bytesTotal = pkgs+1, bytesTotal+b
		}
	}
	t.Logf("the plugin built with -tags etcd initialises %d packages, allocating %d bytes", pkgs, bytesTotal)
	if pkgs == 0 {
		t.Errorf("no inittrace output: %s", stderr.String())
	}
}
