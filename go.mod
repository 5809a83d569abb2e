module github.com/ipamkit/ipam

go 1.26.0

require (
	github.com/google/go-cmp v0.7.0
	github.com/stretchr/testify v1.12.1
	go4.org/netipx v0.0.0-20260823151212-3075585bcbeb
)

require go.yaml.in/yaml/v3 v3.0.5 // indirect
