package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/modfile"
)

// TestRelease releases a copy of the repository, made a git repository of
// one commit, with the release program's own steps (every module requiring
// its siblings at one version, no replace directives, each go.sum tidied
// against the siblings as published, the commit and a tag per published
// module), publishing to a module proxy in a directory, then consumes it as a
// user would, outside the workspace, with only the repository's modules
// coming from that proxy:
//
//   - a new module that needs only the root module, only k8s, or only
//     store/etcdstore gets it with go get, builds and runs;
//   - go install of each program at the version builds it, and it runs.
//
// The version is unique to the run (v0.0.0-releasetest.<nanoseconds>), and
// what the go command cached for it is removed from the shared module cache
// when the test ends: a fixed version would be served from the cache on the
// next run however the code changed, and would shadow a real release of that
// version. Third-party modules come from the go command's GOPROXY as usual
// (from the module cache when a build of the repository fetched them already).
func TestRelease(t *testing.T) {
	if testing.Short() {
		t.Skip("publishes every module and builds the programs from the published copies")
	}
	for _, tool := range []string{"go", "git"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not on PATH (%v): the release test runs the go command on a copy of the repository that git lists", tool, err)
		}
	}
	ctx := t.Context()
	repo, err := filepath.Abs(filepath.Join("..", ".."))
	must(t, err)
	files, err := trackedFiles(ctx, repo)
	must(t, err)
	root := t.TempDir()
	copyFiles(t, repo, root, files)
	mods, err := readModules(root)
	must(t, err)
	upstream, err := goEnvVar(ctx, "GOPROXY")
	must(t, err)
	modcache, err := goEnvVar(ctx, "GOMODCACHE")
	must(t, err)

	// A run stopped before its cleanup (a timeout) leaves its version in the
	// cache: take away those more than an hour old.
	must(t, sweepModCache(modcache, mods, time.Now().Add(-time.Hour)))
	version := fmt.Sprintf("%s%d", testVersionPrefix, time.Now().UnixNano())
	t.Logf("version %s; upstream GOPROXY %s", version, upstream)
	t.Cleanup(func() {
		if err := dropFromModCache(modcache, mods, version); err != nil {
			t.Errorf("removing %s from the module cache: %v", version, err)
		}
	})

	// The copy as a clone: one commit of the files, then the release
	// program's steps, commit and tags included.
	for k, v := range map[string]string{"GIT_AUTHOR_NAME": "release test", "GIT_AUTHOR_EMAIL": "release@test.invalid",
		"GIT_COMMITTER_NAME": "release test", "GIT_COMMITTER_EMAIL": "release@test.invalid", "GIT_CONFIG_GLOBAL": os.DevNull} {
		t.Setenv(k, v)
	}
	for _, args := range [][]string{{"init", "-q"}, {"add", "-A"}, {"commit", "-q", "-m", "copy"}} {
		_, err := git(ctx, root, args...)
		must(t, err)
	}
	p := proxy{Dir: t.TempDir()}
	start := time.Now()
	tags, err := release(ctx, root, version, true, p)
	must(t, err)
	t.Logf("released %d modules in %v", len(mods), time.Since(start).Round(time.Millisecond))
	var want []string
	for _, m := range mods {
		if m.Published {
			want = append(want, m.Tag(version))
		}
	}
	got, err := git(ctx, root, "tag", "--list")
	must(t, err)
	if gotTags := strings.Fields(got); !equalSets(gotTags, want) || !equalSets(tags, want) {
		t.Errorf("tags %v (returned %v), want %v", gotTags, tags, want)
	}
	if st, err := git(ctx, root, "status", "--porcelain"); err != nil || st != "" {
		t.Errorf("after the release commit, git status: %q %v", st, err)
	}
	if msg, err := git(ctx, root, "log", "-1", "--format=%s"); err != nil || msg != "release: "+version {
		t.Errorf("release commit %q %v", msg, err)
	}

	// What the proxy serves: each published module's go.mod requires its
	// siblings at the version and replaces nothing.
	byPath := map[string]Module{}
	for _, m := range mods {
		byPath[m.Path] = m
	}
	for _, m := range mods {
		data, err := os.ReadFile(filepath.Join(p.Dir, filepath.FromSlash(escaped(m.Path)), "@v", version+".mod"))
		must(t, err)
		mf, err := modfile.Parse(m.Path+"@"+version, data, nil)
		must(t, err)
		if m.Published && len(mf.Replace) > 0 {
			t.Errorf("%s@%s: go.mod has %d replace directives", m.Path, version, len(mf.Replace))
		}
		for _, r := range mf.Require {
			if _, ok := byPath[r.Mod.Path]; ok && r.Mod.Version != version {
				t.Errorf("%s@%s requires %s", m.Path, version, r.Mod)
			}
		}
	}

	env := p.goEnv(upstream)
	for _, c := range []struct {
		module string
		main   string
		want   string
	}{
		{rootPath, `package main

import (
	"context"
	"fmt"

	"github.com/ipamkit/ipam"
)

func main() {
	cat, err := ipam.NewCatalog(ipam.MustParsePool(` + "`" + `{"name":"blue","ranges":[{"subnet":"10.0.0.0/24"}]}` + "`" + `))
	if err != nil {
		panic(err)
	}
	alloc, err := ipam.NewAllocator(ipam.Options{Pools: cat})
	if err != nil {
		panic(err)
	}
	res, err := alloc.Allocate(context.Background(), ipam.Request{Namespace: "default", Name: "web-0", UID: "u1",
		Interfaces: []ipam.NIC{{Name: "eth0", Pools: []string{"blue"}}}})
	if err != nil {
		panic(err)
	}
	fmt.Println(res.IPs[0].Address)
}
`, "10.0.0.2/24"},
		{rootPath + "/k8s", `package main

import (
	"fmt"

	"github.com/ipamkit/ipam/k8s"
	"github.com/ipamkit/ipam/k8s/kubestore"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var _ = kubestore.New

func main() {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-0", UID: "u1"}}
	req := k8s.Request(pod, nil, nil)
	fmt.Println(req.Namespace + "/" + req.Name)
}
`, "default/web-0"},
		{rootPath + "/store/etcdstore", `package main

import (
	"fmt"

	"github.com/ipamkit/ipam/store/etcdstore"
)

var _ = etcdstore.New

func main() {
	fmt.Println(etcdstore.DefaultPrefix)
}
`, "/ipam/"},
	} {
		name := strings.TrimPrefix(strings.TrimPrefix(c.module, rootPath), "/")
		if name == "" {
			name = "root"
		}
		t.Run("downstream/"+name, func(t *testing.T) {
			dir := t.TempDir()
			must(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example.com/downstream\n\ngo 1.26.0\n"), 0o644))
			must(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(c.main), 0o644))
			for _, args := range [][]string{{"get", c.module + "@" + version}, {"mod", "tidy"}, {"build", "-o", "prog", "."}} {
				_, err := goCmd(ctx, dir, env, args...)
				must(t, err)
			}
			got, err := goCmd(ctx, dir, env, "list", "-m", "-f", "{{.Path}} {{.Version}}", rootPath)
			must(t, err)
			if want := rootPath + " " + version + "\n"; got != want {
				t.Errorf("root module: %q, want %q", got, want)
			}
			gomod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
			must(t, err)
			mf, err := modfile.Parse("go.mod", gomod, nil)
			must(t, err)
			for _, r := range mf.Require {
				if strings.HasPrefix(r.Mod.Path, rootPath) && r.Mod.Path != c.module && !r.Indirect {
					t.Errorf("the downstream module had to require %s itself:\n%s", r.Mod, gomod)
				}
			}
			out, err := exec.CommandContext(ctx, filepath.Join(dir, "prog")).CombinedOutput()
			must(t, err)
			if strings.TrimSpace(string(out)) != c.want {
				t.Errorf("program printed %q, want %q", out, c.want)
			}
		})
	}

	bin := t.TempDir()
	install := append(env, "GOBIN="+bin)
	for _, c := range []struct {
		name string
		tags string
		run  func(t *testing.T, prog string)
	}{
		{"cni-ipam", "", checkCNIVersion},
		{"cni-ipam", "etcd,kubernetes", checkCNIVersion},
		{"ipamctl", "", func(t *testing.T, prog string) {
			out, err := exec.CommandContext(ctx, prog, "help").CombinedOutput()
			must(t, err)
			if !strings.HasPrefix(string(out), "usage: ipamctl") {
				t.Errorf("ipamctl help printed %q", out)
			}
		}},
	} {
		t.Run("install/"+c.name+"/tags="+c.tags, func(t *testing.T) {
			args := []string{"install"}
			if c.tags != "" {
				args = append(args, "-tags", c.tags)
			}
			// Outside any module: go install pkg@version uses the
			// program's module as published, go.mod and all.
			_, err := goCmd(ctx, t.TempDir(), install, append(args, rootPath+"/cmd/"+c.name+"@"+version)...)
			must(t, err)
			c.run(t, filepath.Join(bin, c.name))
		})
	}
}

func equalSets(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// testVersionPrefix starts every version TestRelease publishes; the
// nanoseconds of its start follow.
const testVersionPrefix = "v0.0.0-releasetest."

// sweepModCache drops from the module cache the versions of mods that
// TestRelease published before cutoff.
func sweepModCache(modcache string, mods []Module, cutoff time.Time) error {
	var errs []error
	for _, m := range mods {
		entries, err := os.ReadDir(filepath.Join(modcache, "cache", "download", filepath.FromSlash(escaped(m.Path)), "@v"))
		if err != nil {
			continue
		}
		for _, e := range entries {
			v, ok := strings.CutSuffix(e.Name(), ".info")
			if !ok {
				continue
			}
			ns, ok := strings.CutPrefix(v, testVersionPrefix)
			if !ok {
				continue
			}
			if n, err := strconv.ParseInt(ns, 10, 64); err == nil && time.Unix(0, n).Before(cutoff) {
				errs = append(errs, dropFromModCache(modcache, mods, v))
			}
		}
	}
	return errors.Join(errs...)
}

// checkCNIVersion runs the plugin's VERSION command.
func checkCNIVersion(t *testing.T, prog string) {
	cmd := exec.CommandContext(t.Context(), prog)
	cmd.Env = append(os.Environ(), "CNI_COMMAND=VERSION")
	cmd.Stdin = strings.NewReader(`{"cniVersion":"1.1.0"}`)
	out, err := cmd.Output()
	must(t, err)
	var v struct {
		SupportedVersions []string `json:"supportedVersions"`
	}
	must(t, json.Unmarshal(out, &v))
	if len(v.SupportedVersions) == 0 || v.SupportedVersions[len(v.SupportedVersions)-1] != "1.1.0" {
		t.Errorf("cni-ipam VERSION: %s", out)
	}
}

// copyFiles copies files (relative to from) into to.
func copyFiles(t *testing.T, from, to string, files []string) {
	t.Helper()
	for _, f := range files {
		src, dst := filepath.Join(from, filepath.FromSlash(f)), filepath.Join(to, filepath.FromSlash(f))
		fi, err := os.Lstat(src)
		must(t, err)
		if !fi.Mode().IsRegular() {
			continue
		}
		data, err := os.ReadFile(src)
		must(t, err)
		must(t, os.MkdirAll(filepath.Dir(dst), 0o755))
		must(t, os.WriteFile(dst, data, fi.Mode().Perm()))
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
