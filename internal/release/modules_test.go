package main

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/mod/modfile"
)

// TestRepositoryModules checks the repository as committed, in the shape a
// release needs: every module that go.work uses is in the published table;
// no go.mod has a replace directive; every module requires its siblings at
// one version; and go.work replaces each required sibling at that version by
// its own directory, so that the workspace builds without a proxy that has it.
func TestRepositoryModules(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	must(t, err)
	mods, err := readModules(root)
	must(t, err)
	version := ""
	dirOf := map[string]string{}
	for _, m := range mods {
		dirOf[m.Path] = m.Dir
	}
	required := map[string]bool{}
	for _, m := range mods {
		mf, err := readGoMod(root, m.Dir)
		must(t, err)
		for _, r := range mf.Replace {
			t.Errorf("%s/go.mod: replace %s => %s: go.work joins the modules; a replace directive breaks go install and downstream builds", m.Dir, r.Old, r.New)
		}
		for _, r := range mf.Require {
			if _, ok := dirOf[r.Mod.Path]; !ok {
				continue
			}
			required[r.Mod.Path] = true
			if version == "" {
				version = r.Mod.Version
			}
			if r.Mod.Version != version {
				t.Errorf("%s/go.mod requires %s, others %s: every module requires its siblings at one version (go run ./internal/release sets it)", m.Dir, r.Mod, version)
			}
		}
	}
	data, err := os.ReadFile(filepath.Join(root, "go.work"))
	must(t, err)
	work, err := modfile.ParseWork("go.work", data, nil)
	must(t, err)
	replaced := map[string]bool{}
	for _, r := range work.Replace {
		dir, ok := dirOf[r.Old.Path]
		if !ok {
			continue
		}
		want := "./" + dir
		if dir == "." {
			want = "./"
		}
		if r.Old.Version != version || filepath.Clean(r.New.Path) != filepath.Clean(want) {
			t.Errorf("go.work: replace %s => %s, want %s %s => %s", r.Old, r.New.Path, r.Old.Path, version, want)
		}
		replaced[r.Old.Path] = true
	}
	for p := range required {
		if !replaced[p] {
			t.Errorf("go.work has no replace for %s %s, which a module requires", p, version)
		}
	}
}
