package subnet_test

import (
	"encoding/json"
	"errors"
	"strconv"
	"testing"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/subnet"
)

// FuzzParseIPNumber: no panic; errors are *AnnotationErrors of
// AnnotationIPNumber wrapping ErrInvalid that quote the value; an accepted
// value is "N" or "+N" with N not negative, and writes back as it parses.
func FuzzParseIPNumber(f *testing.F) {
	for _, s := range []string{"0", "+1", "++1", "abc", "-1", "+0", "", " 1", "99999999999999999999", "+-1", "1e3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := subnet.ParseIPNumber(s)
		if err != nil {
			var ae *ipam.AnnotationError
			if !errors.As(err, &ae) || ae.Key != subnet.AnnotationIPNumber || !errors.Is(err, ipam.ErrInvalid) {
				t.Fatalf("%q: error %v is not an AnnotationError of %s wrapping ErrInvalid", s, err, subnet.AnnotationIPNumber)
			}
			return
		}
		if n.N < 0 {
			t.Fatalf("accepted %q as %d", s, n.N)
		}
		back, err := subnet.ParseIPNumber(n.String())
		if err != nil || back != n {
			t.Fatalf("%q: %v writes back as %q, which parses as %v, %v", s, n, n.String(), back, err)
		}
		if want := strconv.Itoa(n.N); n.String() != want && n.String() != "+"+want {
			t.Fatalf("%q: writes %q", s, n.String())
		}
	})
}

// FuzzParseSubnet: no panic; errors wrap ErrInvalid; an accepted subnet is
// valid and round-trips through JSON.
func FuzzParseSubnet(f *testing.F) {
	for _, s := range []string{
		`{"name":"s","subnet":"10.6.0.0/16","gateway":"10.6.0.1","ips":["10.6.168.101-10.6.168.110"],"routes":[{"dst":"10.7.0.0/16","gw":"10.6.0.1"}]}`,
		`{"name":"s6","subnet":"fd00::/64","ips":["fd00::10-fd00::20"],"excludeIPs":["fd00::15"],"vlan":3}`,
		`{"name":"s","subnet":"10.6.0.1/16"}`, `{"name":"s","subnet":"10.6.0.0/16","ips":["10.7.0.1"]}`, `{}`, `[]`, `{"IPs":[]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := subnet.Parse(data)
		if err != nil {
			if !errors.Is(err, ipam.ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("accepted an invalid subnet: %v", err)
		}
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		back, err := subnet.Parse(b)
		if err != nil {
			t.Fatalf("%s does not parse back: %v", b, err)
		}
		b2, _ := json.Marshal(back)
		if string(b) != string(b2) {
			t.Fatalf("round trip: %s then %s", b, b2)
		}
	})
}

// FuzzDecide: whatever the annotations and counts, the decisions
// never panic, every failure says why, and the pools created are disjoint,
// inside the subnet, and of distinct names (a third application has the
// first one's name and five UID characters, in another namespace).
func FuzzDecide(f *testing.F) {
	f.Add(`{"ipv4":["subnet-6"]}`, "", "+1", "", 2, "Deployment")
	f.Add("", `[{"interface":"eth0","ipv4":["subnet-6"]},{"interface":"net1","ipv4":["subnet-7"]}]`, "3", "false", 1, "StatefulSet")
	f.Add(`{"ipv4":["subnet-6"],"ipv6":["x"]}`, "", "++1", "maybe", 40, "apps.kruise.io/v1alpha1/CloneSet")
	f.Add(`{"ipv4":["subnet-7"]}`, "", "+0", "true", 0, "DaemonSet")
	f.Add("", `[{"interface":"net1","ipv4":["subnet-6"]},{"interface":"NET1","ipv4":["subnet-7"]}]`, "1", "", 1, "Deployment")
	f.Fuzz(func(t *testing.T, single, subnets, number, reclaim string, replicas int, kind string) {
		ann := map[string]string{}
		for k, v := range map[string]string{ipam.AnnotationSubnet: single, ipam.AnnotationSubnets: subnets, subnet.AnnotationIPNumber: number, subnet.AnnotationReclaim: reclaim} {
			if v != "" {
				ann[k] = v
			}
		}
		replicas %= 1000
		twin := ssApp("Deployment", "a", "u-c-a5bd3c", 1, ssAnn(ipam.AnnotationSubnet, `{"ipv4":["subnet-7"]}`, subnet.AnnotationIPNumber, "1"))
		twin.Namespace = "other"
		apps := []subnet.Application{ssApp(kind, "a", "u-a-a5bd3", replicas, ann), ssApp("Deployment", "b", "u-b-b0b0b", 3, ssAnn(ipam.AnnotationSubnet, `{"ipv4":["subnet-6"]}`)), twin}
		snap, err := subnet.NewSnapshot([]*subnet.Subnet{ssSubnet6(), ssSubnet7()}, nil, nil, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		var created []*subnet.AutoPool
		for _, d := range subnet.Decide(apps, snap, subnet.Options{}) {
			switch d.Action {
			case subnet.Fail, subnet.Wait:
				if d.Err == nil || d.Message == "" {
					t.Fatalf("%s without a reason", d.Action)
				}
			case subnet.Create:
				created = append(created, d.Pool)
			}
		}
		for i, a := range created {
			if err := a.Pool.Validate(); err != nil {
				t.Fatalf("created an invalid pool: %v", err)
			}
			if len(a.Name()) > 253 {
				t.Fatalf("name %q too long", a.Name())
			}
			for _, b := range created[:i] {
				if a.Name() == b.Name() {
					t.Fatalf("two pools named %q", a.Name())
				}
				for _, r := range a.Pool.IPs {
					for _, q := range b.Pool.IPs {
						if r.Overlaps(q) {
							t.Fatalf("pools %s and %s overlap", a.Name(), b.Name())
						}
					}
				}
			}
		}
	})
}
