module github.com/ipamkit/ipam/examples

go 1.26.0

require github.com/ipamkit/ipam v0.0.0
