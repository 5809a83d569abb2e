package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"go4.org/netipx"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/hostlocal"
	"github.com/ipamkit/ipam/store"
	"github.com/ipamkit/ipam/store/filestore"
)

// stateAllocator returns an Allocator over the range sets of the host-local
// network config in confPath, whose claims are the files of dir (by default
// the config's dataDir/name), and what closes it. Reading a large
// directory takes a while (every claim file is read, and an owner index
// written to a temporary directory): it reports how far it got to p.
func stateAllocator(confPath, dir string, p *progress) (*ipam.Allocator, store.Store, func(), error) {
	data, err := os.ReadFile(confPath)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("--cni-config: %w", err)
	}
	conf, err := hostlocal.Load(pluginConf(data), "")
	if err != nil {
		return nil, nil, nil, fmt.Errorf("--cni-config %s: %w", confPath, err)
	}
	if dir == "" {
		dir = filepath.Join(conf.DataDir, conf.Name)
	}
	if fi, err := os.Stat(dir); err != nil {
		return nil, nil, nil, fmt.Errorf("state directory: %w", err)
	} else if !fi.IsDir() {
		return nil, nil, nil, fmt.Errorf("state directory %s: not a directory", dir)
	}
	pools := make([]filestore.Pool, len(conf.Pools))
	for i, p := range conf.Pools {
		rs, err := p.RangeSet()
		if err != nil {
			return nil, nil, nil, fmt.Errorf("--cni-config %s: %w", confPath, err)
		}
		var b netipx.IPSetBuilder
		for _, r := range rs {
			b.AddRange(r.IPRange())
		}
		set, err := b.IPSet()
		if err != nil {
			return nil, nil, nil, fmt.Errorf("--cni-config %s: pool %s: %w", confPath, p.Name, err)
		}
		pools[i] = filestore.Pool{Name: p.Name, Index: i, Prefixes: set.Prefixes()}
	}
	// The owner index goes to a directory of its own, removed after: the
	// node's state is only read.
	idx, err := os.MkdirTemp("", "ipamctl-owners-")
	if err != nil {
		return nil, nil, nil, err
	}
	st, err := filestore.Open(dir, filestore.Options{Pools: pools, IndexDir: filepath.Join(idx, "index"),
		Progress: func(done, total int, what string) {
			if what == "owners" {
				what = "owners into a temporary owner index"
			}
			p.report(done, total, what)
		}})
	p.end()
	if err != nil {
		os.RemoveAll(idx)
		return nil, nil, nil, fmt.Errorf("state directory %s: %w", dir, err)
	}
	closeAll := func() {
		st.Close()
		os.RemoveAll(idx)
	}
	cat, err := ipam.NewCatalog(conf.Pools...)
	if err == nil {
		var a *ipam.Allocator
		if a, err = ipam.NewAllocator(ipam.Options{Pools: cat, Store: st}); err == nil {
			return a, st, closeAll, nil
		}
	}
	closeAll()
	return nil, nil, nil, fmt.Errorf("--cni-config %s: %w", confPath, err)
}

// pluginConf returns the network config of the first plugin of a config
// list that has an ipam section, with the list's name and cniVersion, as
// the runtime hands it to the plugin; a single config is returned as it is.
func pluginConf(data []byte) []byte {
	var list struct {
		CNIVersion string                       `json:"cniVersion"`
		Name       string                       `json:"name"`
		Plugins    []map[string]json.RawMessage `json:"plugins"`
	}
	if json.Unmarshal(data, &list) != nil || list.Plugins == nil {
		return data
	}
	for _, p := range list.Plugins {
		if _, ok := p["ipam"]; !ok {
			continue
		}
		p["name"], _ = json.Marshal(list.Name)
		p["cniVersion"], _ = json.Marshal(list.CNIVersion)
		out, err := json.Marshal(p)
		if err == nil {
			return out
		}
	}
	return data
}
