package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"k8s.io/client-go/rest"

	"github.com/ipamkit/ipam/k8s/kubestore"
	"github.com/ipamkit/ipam/store"
)

// This file reads a live cluster (--kubeconfig) instead of files: the same
// kinds, listed through the API server page by page, each page read as a
// document of a file named after its resource, and the cluster's IPClaims
// (k8s/kubestore), which hold the claims of clusters that allocate with
// this library.

// liveResources are the collections ipamctl lists, by the path of their
// API, in the order files would be read.
var liveResources = []string{
	"/apis/spiderpool.spidernet.io/v2beta1/spiderippools",
	"/apis/spiderpool.spidernet.io/v2beta1/spiderreservedips",
	"/api/v1/namespaces",
	"/api/v1/nodes",
	"/api/v1/pods",
	"/apis/apps/v1/statefulsets",
}

// livePage is the page size of the lists.
const livePage = 500

// loadLive reads the cluster cfg names into a cluster, and its IPClaims of
// the pools read: a list of each resource, then of the claims of each pool,
// all bounded by ctx. A resource the server does not serve (the Spiderpool
// CRDs not installed) is a problem; the others are still read.
//
// It reports its progress to p: the objects of each resource read, of
// about how many (the server's remainingItemCount), and the IPClaims.
func loadLive(ctx context.Context, cfg *rest.Config, p *progress) (*cluster, error) {
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig: %w", err)
	}
	defer client.CloseIdleConnections()
	base, err := url.Parse(cfg.Host)
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig: server %q: %w", cfg.Host, err)
	}
	c := newCluster()
	for _, path := range liveResources {
		name := base.Host + path
		c.files = append(c.files, name)
		what := path[strings.LastIndexByte(path, '/')+1:]
		cont, read := "", 0
		for {
			u := *base
			u.Path = path
			q := url.Values{"limit": {strconv.Itoa(livePage)}}
			if cont != "" {
				q.Set("continue", cont)
			}
			u.RawQuery = q.Encode()
			data, err := getJSON(ctx, client, u.String())
			if err != nil {
				if ctx.Err() != nil {
					return nil, fmt.Errorf("reading %s: %w", name, err)
				}
				c.addProblem(origin{file: name}, "cannot read: %v", err)
				break
			}
			c.load(name, data)
			var page struct {
				Metadata struct {
					Continue  string `json:"continue"`
					Remaining int    `json:"remainingItemCount"`
				} `json:"metadata"`
				Items []json.RawMessage `json:"items"`
			}
			err = json.Unmarshal(data, &page)
			read += len(page.Items)
			total := 0 // not known
			if page.Metadata.Remaining > 0 || page.Metadata.Continue == "" {
				total = read + page.Metadata.Remaining
			}
			p.report(read, total, what)
			if err != nil || page.Metadata.Continue == "" {
				break
			}
			cont = page.Metadata.Continue
		}
	}
	st, err := kubestore.New(cfg, kubestore.Options{})
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig: %w", err)
	}
	for i, po := range c.pools {
		p.report(len(c.liveClaims), 0, fmt.Sprintf("IPClaims (pool %d of %d)", i+1, len(c.pools)))
		claims, err := st.List(ctx, po.pool.Name)
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("reading the IPClaims of pool %s: %w", po.pool.Name, err)
			}
			c.addProblem(po.at, "IPClaims: %v", err)
		}
		c.liveClaims = append(c.liveClaims, claims...)
	}
	slices.SortFunc(c.liveClaims, func(a, b store.Claim) int {
		return cmp.Or(strings.Compare(a.Pool, b.Pool), a.IP.Compare(b.IP))
	})
	c.live = true
	return c, nil
}

// getJSON GETs url and returns its body, or an error with the server's
// message.
func getJSON(ctx context.Context, client *http.Client, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<30))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		var st struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(data, &st) == nil && st.Message != "" {
			return nil, fmt.Errorf("%s: %s", resp.Status, st.Message)
		}
		return nil, fmt.Errorf("%s", resp.Status)
	}
	return data, nil
}
