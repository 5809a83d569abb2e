module github.com/ipamkit/ipam/examples

go 1.26.0

require github.com/ipamkit/ipam v0.0.0

require go4.org/netipx v0.0.0-20260823151212-3075585bcbeb // indirect
