module github.com/ipamkit/ipam/examples

go 1.26.0

require github.com/ipamkit/ipam v0.0.0

require go4.org/netipx v0.0.0-20260823151212-3075585bcbeb // indirect

// The root module exists only in this repository: without this line the go
// command, run with GOWORK=off, fetches its go.mod from the proxy.
replace github.com/ipamkit/ipam => ../
