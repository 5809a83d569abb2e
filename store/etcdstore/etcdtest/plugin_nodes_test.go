package etcdtest_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The CNI plugin over etcd on two nodes (issue 26): each node runs the
// plugin binary in processes of its own, and has a state directory of its
// own; they share the network's claims in etcd.

// node is one node: the plugin binary, and the node's state directory.
type node struct {
	t   *testing.T
	bin string
	dir string
}

func newNode(t *testing.T, bin string) node {
	return node{t: t, bin: bin, dir: t.TempDir()}
}

// cni runs the plugin on the node.
func (n node) cni(command, id, conf string) cniResult {
	n.t.Helper()
	return cni(n.t, n.bin, command, id, conf)
}

// withGC returns conf with cni.dev/valid-attachments listing ids on eth0.
func withGC(conf string, ids ...string) string {
	list := make([]string, len(ids))
	for i, id := range ids {
		list[i] = fmt.Sprintf(`{"containerID": %q, "ifname": "eth0"}`, id)
	}
	return strings.Replace(conf, `"name":`, `"cni.dev/valid-attachments": [`+strings.Join(list, ", ")+`], "name":`, 1)
}

// TestPluginEtcdGCOnTwoNodes (issue 26, case 1): node A's GC, whose
// cni.dev/valid-attachments lists only node A's containers, releases none
// of node B's claims in etcd (nor any other: the claims record no node):
// node B's CHECK still passes, and node A's next ADD does not get node B's
// address.
func TestPluginEtcdGCOnTwoNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the plugin")
	}
	bin := etcdPlugin(t)
	conf := pluginConf("gcnet", "10.78.0.0/24", newPrefix(t), "", single.Endpoints()...)
	a, b := newNode(t, bin), newNode(t, bin)

	if r := a.cni("ADD", "cA", conf); r.Code != 0 || len(r.IPs) != 1 || r.IPs[0].Address != "10.78.0.2/24" {
		t.Fatalf("node A: ADD cA = %+v, want 10.78.0.2/24", r)
	}
	rb := b.cni("ADD", "cB", conf)
	if rb.Code != 0 || len(rb.IPs) != 1 || rb.IPs[0].Address != "10.78.0.3/24" {
		t.Fatalf("node B: ADD cB = %+v, want 10.78.0.3/24", rb)
	}
	if r := a.cni("GC", "", withGC(conf, "cA")); r.Code != 0 {
		t.Fatalf("node A: GC = %+v, want success", r)
	}
	if r := b.cni("CHECK", "cB", conf); r.Code != 0 {
		t.Errorf("node B: CHECK cB after node A's GC = %+v, want success", r)
	}
	if r := a.cni("ADD", "cF", conf); r.Code != 0 || len(r.IPs) != 1 || r.IPs[0].Address == rb.IPs[0].Address {
		t.Errorf("node A: ADD cF after its GC = %+v; node B's cB holds %s", r, rb.IPs[0].Address)
	}
	// An empty list (nothing valid) releases nothing either.
	if r := b.cni("GC", "", withGC(conf)); r.Code != 0 {
		t.Fatalf("node B: GC with an empty list = %+v, want success", r)
	}
	for _, c := range []struct {
		n  node
		id string
	}{{a, "cA"}, {b, "cB"}, {a, "cF"}} {
		if r := c.n.cni("CHECK", c.id, conf); r.Code != 0 {
			t.Errorf("CHECK %s after GC with an empty list = %+v, want success", c.id, r)
		}
	}
	// A bad section is still refused.
	bad := pluginConf("gcnet", "10.78.0.0/24", newPrefix(t), `, "timeout": "soon"`, single.Endpoints()...)
	if r := a.cni("GC", "", withGC(bad, "cA")); r.Code != 7 || !strings.Contains(r.Msg, `"soon"`) {
		t.Errorf("node A: GC with a bad timeout = %+v, want code 7 naming it", r)
	}
	// DEL still releases.
	if r := b.cni("DEL", "cB", conf); r.Code != 0 {
		t.Fatalf("node B: DEL cB = %+v", r)
	}
	if r := b.cni("CHECK", "cB", conf); r.Code == 0 {
		t.Errorf("node B: CHECK cB after its DEL passed")
	}
}

// TestPluginEtcdNullSection (issue 26, case 2): a node whose config has
// "etcd": null (a template's unset value) fails with a configuration error
// naming ipam.etcd, instead of handing out, from its own state directory,
// the address that another node holds in etcd.
func TestPluginEtcdNullSection(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the plugin")
	}
	bin := etcdPlugin(t)
	conf := pluginConf("nullnet", "10.79.0.0/24", newPrefix(t), "", single.Endpoints()...)
	a, b := newNode(t, bin), newNode(t, bin)
	if r := a.cni("ADD", "cA", conf); r.Code != 0 || len(r.IPs) != 1 || r.IPs[0].Address != "10.79.0.2/24" {
		t.Fatalf("node A: ADD cA = %+v, want 10.79.0.2/24", r)
	}
	// Node B's config as a template renders it with the etcd section
	// unset, and with the node's own state directory.
	null := fmt.Sprintf(`{"cniVersion": "1.1.0", "name": "nullnet", "type": "bridge", "ipam": {"type": "cni-ipam",
		"ranges": [[{"subnet": "10.79.0.0/24"}]], "etcd": null, "dataDir": %q}}`, b.dir)
	r := b.cni("ADD", "cB", null)
	if r.Code != 7 || !strings.Contains(r.Msg, "ipam.etcd: null") {
		t.Errorf("node B: ADD with \"etcd\": null = %+v, want code 7 naming ipam.etcd (node A holds 10.79.0.2)", r)
	}
	if entries, err := os.ReadDir(b.dir); err != nil || len(entries) != 0 {
		t.Errorf("node B's state directory holds %v (%v), want nothing", entries, err)
	}
}

// TestPluginEtcdFilesSizeLimited (issue 26, case 8): the TLS files of the
// etcd section are read up to 4 MiB: a larger one (/dev/zero never ends)
// is a configuration error naming the field and the file, not a plugin
// out of memory.
func TestPluginEtcdFilesSizeLimited(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the plugin")
	}
	bin := etcdPlugin(t)
	big := filepath.Join(t.TempDir(), "big")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(64 << 20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	for _, file := range []string{big, "/dev/zero"} {
		for _, field := range []string{"caFile", "certFile", "keyFile"} {
			extra := fmt.Sprintf(`, %q: %q`, field, file)
			switch field {
			case "certFile":
				extra += `, "keyFile": "/nonexistent/key.pem"`
			case "keyFile":
				extra += `, "certFile": "/nonexistent/cert.pem"`
			}
			conf := pluginConf("tlsnet", "10.80.0.0/24", newPrefix(t), extra, "https://127.0.0.1:1")
			for _, command := range []string{"ADD", "STATUS"} {
				r := cni(t, bin, command, "c1", conf)
				want := fmt.Sprintf("ipam.etcd.%s %q: larger than the limit of 4 MiB", field, file)
				if r.Code != 7 || !strings.Contains(r.Msg, want) {
					t.Errorf("%s with %s %s = %+v, want code 7: %s", command, field, file, r, want)
				}
			}
		}
	}
}
