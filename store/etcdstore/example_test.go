package etcdstore_test

import (
	"encoding/json"
	"fmt"

	"github.com/ipamkit/ipam/store/etcdstore"
)

// A CNI network config's "etcd" section, read into a Config: NewFromConfig
// would connect a Store with it.
func ExampleConfig() {
	var netconf struct {
		Etcd etcdstore.Config `json:"etcd"`
	}
	err := json.Unmarshal([]byte(`{
		"etcd": {
			"endpoints": ["https://10.0.0.1:2379", "https://10.0.0.2:2379", "https://10.0.0.3:2379"],
			"prefix": "/ipam/cluster-a/",
			"caFile": "/etc/cni/etcd/ca.pem",
			"certFile": "/etc/cni/etcd/client.pem",
			"keyFile": "/etc/cni/etcd/client-key.pem",
			"timeout": "3s"
		}
	}`), &netconf)
	if err != nil {
		panic(err)
	}
	opts := netconf.Etcd.Options()
	fmt.Println(opts.Endpoints, opts.Prefix, opts.Timeout, netconf.Etcd.Validate())

	// A section with problems names every one.
	bad := etcdstore.Config{Endpoints: []string{"http://10.0.0.1:2379"}, CertFile: "/etc/cni/etcd/client.pem"}
	fmt.Println(bad.Validate())
	// Output:
	// [https://10.0.0.1:2379 https://10.0.0.2:2379 https://10.0.0.3:2379] /ipam/cluster-a/ 3s <nil>
	// endpoints[0] "http://10.0.0.1:2379": plain http with TLS configured; use https://
	// certFile "/etc/cni/etcd/client.pem" and keyFile "": set both or neither
}
