// Package alerttest evaluates the alerting rules of ../alerts.yaml with
// Prometheus' own rule engine (github.com/prometheus/prometheus/rules and
// promql) on series scraped from the metrics package's collectors while an
// ipam.Allocator serves a scripted history.
//
// It is a module of its own, outside the repository's go.work: the
// Prometheus server module is large, and requires a newer Go release than
// the others. Run it from this directory with GOWORK=off:
//
//	cd metrics/alerttest && GOWORK=off go test -race -count=1 ./...
package alerttest
