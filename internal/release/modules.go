package main

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
)

// rootPath is the path of the repository's root module; every module of the
// workspace has it as a prefix.
const rootPath = "github.com/ipamkit/ipam"

// published says, for every module of the workspace (its directory relative
// to the repository root, as go.work names it), whether a release tags it.
// Published modules are the ones a user fetches: the library, its Kubernetes
// and etcd modules, the test harnesses other repositories' tests import, and
// the programs. The others are built from a clone only. A module that go.work
// uses and this table does not name is an error, so that adding one forces
// the decision.
var published = map[string]bool{
	".":                             true,
	"k8s":                           true,
	"k8s/kubetest":                  true,
	"store/etcdstore":               true,
	"store/etcdstore/etcdtest":      true,
	"cmd":                           true,
	"metrics":                       true,
	"benchmarks":                    false,
	"deploy":                        false,
	"examples":                      false,
	"examples/kubecontroller":       false,
	"store/filestore/hostlocaltest": false,
	"internal/release":              false,
}

// A Module is one module of the workspace.
type Module struct {
	Dir       string // relative to the repository root, slash-separated ("." for the root)
	Path      string // module path
	Published bool   // tagged by a release
	Siblings  []string
}

// Tag is the git tag that releases m at version: the version for the root
// module, "<dir>/<version>" for a nested one.
func (m Module) Tag(version string) string {
	if m.Dir == "." {
		return version
	}
	return m.Dir + "/" + version
}

// readModules reads go.work in root and returns its modules, each after the
// siblings it requires (so that publishing them in order publishes every
// requirement first).
func readModules(root string) ([]Module, error) {
	data, err := os.ReadFile(filepath.Join(root, "go.work"))
	if err != nil {
		return nil, err
	}
	work, err := modfile.ParseWork("go.work", data, nil)
	if err != nil {
		return nil, err
	}
	byPath := map[string]*Module{}
	var all []*Module
	for _, u := range work.Use {
		dir := path.Clean(strings.TrimPrefix(u.Path, "./"))
		pub, ok := published[dir]
		if !ok {
			return nil, fmt.Errorf("go.work: use %q: not in internal/release's published table: decide whether a release tags it", u.Path)
		}
		mf, err := readGoMod(root, dir)
		if err != nil {
			return nil, err
		}
		p := mf.Module.Mod.Path
		if want := path.Join(rootPath, dir); p != want {
			return nil, fmt.Errorf("%s/go.mod: module %q, want %q (a module's path is the root's path and its directory)", dir, p, want)
		}
		m := &Module{Dir: dir, Path: p, Published: pub}
		byPath[p] = m
		all = append(all, m)
	}
	for _, m := range all {
		mf, err := readGoMod(root, m.Dir)
		if err != nil {
			return nil, err
		}
		for _, r := range mf.Require {
			if _, ok := byPath[r.Mod.Path]; ok {
				m.Siblings = append(m.Siblings, r.Mod.Path)
			}
		}
	}
	// Depth-first, requirements first; a cycle is an error, since a module's
	// go.sum holds the hash of every sibling it requires.
	var order []Module
	state := map[string]int{} // 1 visiting, 2 done
	var visit func(m *Module, chain []string) error
	visit = func(m *Module, chain []string) error {
		switch state[m.Path] {
		case 1:
			return fmt.Errorf("modules require each other: %s", strings.Join(append(chain, m.Path), " -> "))
		case 2:
			return nil
		}
		state[m.Path] = 1
		for _, s := range m.Siblings {
			if err := visit(byPath[s], append(chain, m.Path)); err != nil {
				return err
			}
		}
		state[m.Path] = 2
		order = append(order, *m)
		return nil
	}
	for _, m := range all {
		if err := visit(m, nil); err != nil {
			return nil, err
		}
	}
	return order, nil
}

func readGoMod(root, dir string) (*modfile.File, error) {
	name := filepath.Join(root, filepath.FromSlash(dir), "go.mod")
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	return modfile.Parse(name, data, nil)
}

// checkVersion refuses a version a release cannot carry: not canonical
// semver, build metadata, or a major version above 1 (which would change
// every module path).
func checkVersion(v string) error {
	switch {
	case !semver.IsValid(v) || semver.Canonical(v) != v:
		return fmt.Errorf("version %q: not a canonical semantic version (vMAJOR.MINOR.PATCH[-pre])", v)
	case semver.Major(v) != "v0" && semver.Major(v) != "v1":
		return fmt.Errorf("version %q: major version %s needs /%s module paths", v, semver.Major(v), semver.Major(v))
	}
	return nil
}

// setVersion makes every module of mods require its siblings at version and
// drops their replace directives: a dependency's replace directives do not
// apply downstream, and go install pkg@version refuses a module that has
// any. A replace of anything else in a published module is an error. go.work's
// replace lines, which make the required version the workspace's own copy,
// move to version too.
func setVersion(root string, mods []Module, version string) error {
	if err := checkVersion(version); err != nil {
		return err
	}
	sibling := map[string]Module{}
	for _, m := range mods {
		sibling[m.Path] = m
	}
	for _, m := range mods {
		mf, err := readGoMod(root, m.Dir)
		if err != nil {
			return err
		}
		for _, r := range slices.Clone(mf.Replace) {
			if _, ok := sibling[r.Old.Path]; ok {
				if err := mf.DropReplace(r.Old.Path, r.Old.Version); err != nil {
					return err
				}
				continue
			}
			if m.Published {
				return fmt.Errorf("%s/go.mod: replace %s: a published module may not replace anything (downstream ignores it, go install refuses it)", m.Dir, r.Old.Path)
			}
		}
		for _, r := range mf.Require {
			if _, ok := sibling[r.Mod.Path]; ok {
				r.Mod.Version = version
				if err := mf.AddRequire(r.Mod.Path, version); err != nil {
					return err
				}
			}
		}
		mf.Cleanup()
		out, err := mf.Format()
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(root, filepath.FromSlash(m.Dir), "go.mod"), out, 0o644); err != nil {
			return err
		}
	}
	return setWorkReplaces(root, mods, version)
}

// setWorkReplaces rewrites go.work's replace block: each module at version,
// by its directory. In workspace mode the go command still reads the go.mod
// of a workspace module at the version another one requires, from the proxy,
// where an unreleased version does not exist; a replace of that version by
// the directory answers it locally. go.work refuses a replace of a workspace
// module at every version, hence the version.
func setWorkReplaces(root string, mods []Module, version string) error {
	name := filepath.Join(root, "go.work")
	data, err := os.ReadFile(name)
	if err != nil {
		return err
	}
	work, err := modfile.ParseWork("go.work", data, nil)
	if err != nil {
		return err
	}
	mine := map[string]string{}
	for _, m := range mods {
		dir := "./"
		if m.Dir != "." {
			dir = "./" + m.Dir
		}
		mine[m.Path] = dir
	}
	for _, r := range slices.Clone(work.Replace) {
		if _, ok := mine[r.Old.Path]; ok {
			if err := work.DropReplace(r.Old.Path, r.Old.Version); err != nil {
				return err
			}
		}
	}
	for _, m := range mods {
		if !requiredBySibling(mods, m.Path) {
			continue
		}
		if err := work.AddReplace(m.Path, version, mine[m.Path], ""); err != nil {
			return err
		}
	}
	work.Cleanup()
	return os.WriteFile(name, modfile.Format(work.Syntax), 0o644)
}

func requiredBySibling(mods []Module, p string) bool {
	for _, m := range mods {
		if slices.Contains(m.Siblings, p) {
			return true
		}
	}
	return false
}

// escaped is the module path as the module proxy and cache spell it.
func escaped(p string) string {
	e, err := module.EscapePath(p)
	if err != nil {
		panic(err) // every path here passed readModules
	}
	return e
}
