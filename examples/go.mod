module github.com/ipamkit/ipam/examples

go 1.26.0

require (
	github.com/containernetworking/cni v1.3.1
	github.com/google/go-cmp v0.7.0
	github.com/ipamkit/ipam v0.0.0
	github.com/stretchr/testify v1.12.1
	go4.org/netipx v0.0.0-20260823151212-3075585bcbeb
)

require (
	github.com/vishvananda/netns v0.0.4 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/net v0.57.0 // indirect
	golang.org/x/sys v0.47.0 // indirect
	k8s.io/api v0.37.2
	k8s.io/apimachinery v0.37.2
	sigs.k8s.io/yaml v1.6.0
)
