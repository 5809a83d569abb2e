// Command release prepares and tags a release of every published module of
// the repository at one version.
//
// From the root of a clean clone:
//
//	go run ./internal/release v0.1.0          # edit go.mod, go.sum and go.work
//	go run ./internal/release -tag v0.1.0     # the same, then commit and tag
//	go run ./internal/release -tidy           # go mod tidy in every module
//
// It makes every module require its siblings at the version and drops their
// replace directives (go.work joins the modules for development); publishes
// the modules, requirements first, to a module proxy in a temporary
// directory, running go mod tidy in each outside the workspace against it, so
// that each go.sum holds its siblings' hashes at the version as the tagged
// commit will give them; and rewrites go.work's replace lines to the version.
// With -tag it then commits the changes ("release: <version>") and tags each
// published module ("v0.1.0", "k8s/v0.1.0", ...). It pushes nothing: the
// commands to push are printed.
//
// -tidy runs go mod tidy in every module outside the workspace, against the
// work tree's modules at the version they require each other at (v0.0.0
// before the first release, which no proxy has).
//
// Which modules are published is the table in modules.go; the README's
// "Releasing" section says why. TestRelease runs the same steps on a copy of
// the repository and fetches the result as a user would.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

func main() {
	tag := flag.Bool("tag", false, "commit the changes and tag each published module")
	tidy := flag.Bool("tidy", false, "only run go mod tidy in every module, against the work tree's modules at the version they require (no version given)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: go run ./internal/release [-tag] vX.Y.Z\n       go run ./internal/release -tidy\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	var err error
	switch {
	case *tidy && flag.NArg() == 0 && !*tag:
		err = tidyAll(context.Background())
	case !*tidy && flag.NArg() == 1:
		err = run(context.Background(), flag.Arg(0), *tag)
	default:
		flag.Usage()
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, version string, tag bool) error {
	root, err := git(ctx, "", "rev-parse", "--show-toplevel")
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "ipam-release-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	tags, err := release(ctx, root, version, tag, proxy{Dir: tmp})
	if err != nil {
		return err
	}
	if !tag {
		fmt.Printf("go.mod, go.sum and go.work now require %s; review with git diff, commit, then tag:\n", version)
		for _, t := range tags {
			fmt.Println("  git tag -a", t, "-m", "'release "+t+"'")
		}
		return nil
	}
	fmt.Printf("committed and tagged; to publish:\n  git push origin HEAD %s\n", strings.Join(tags, " "))
	return nil
}

// release prepares the clean work tree of the git repository at root for
// version, publishing every module to p on the way, and, with tag, commits
// and tags it. It returns the tags of the published modules. Whatever the
// go command cached for version is removed from the module cache before it
// returns: the real proxy will serve the tag.
func release(ctx context.Context, root, version string, tag bool, p proxy) (tags []string, err error) {
	if err := checkVersion(version); err != nil {
		return nil, err
	}
	if st, err := git(ctx, root, "status", "--porcelain"); err != nil {
		return nil, err
	} else if st != "" {
		return nil, fmt.Errorf("the work tree has changes; commit or stash them first:\n%s", st)
	}
	mods, err := readModules(root)
	if err != nil {
		return nil, err
	}
	for _, m := range mods {
		if !m.Published {
			continue
		}
		t := m.Tag(version)
		if out, _ := git(ctx, root, "tag", "--list", t); out != "" {
			return nil, fmt.Errorf("tag %s exists", t)
		}
		tags = append(tags, t)
	}
	w, err := readWorkTree(ctx, root)
	if err != nil {
		return nil, err
	}
	defer func() {
		if derr := dropFromModCache(w.modcache, mods, version); derr != nil && err == nil {
			err = fmt.Errorf("cleaning the module cache: %w", derr)
		}
	}()
	if err := setVersion(root, mods, version); err != nil {
		return nil, err
	}
	if err := tidyAndPublish(ctx, root, mods, version, w.files, p, w.upstream); err != nil {
		return nil, err
	}
	if !tag {
		return tags, nil
	}
	if _, err := git(ctx, root, "add", "-A", "--", ":(glob)go.work*", ":(glob)**/go.mod", ":(glob)**/go.sum"); err != nil {
		return nil, err
	}
	if st, err := git(ctx, root, "status", "--porcelain"); err != nil {
		return nil, err
	} else if st != "" {
		if _, err := git(ctx, root, "commit", "-m", "release: "+version+"\n\nEvery module requires its siblings at "+version+"; no replace directives."); err != nil {
			return nil, err
		}
	}
	for _, t := range tags {
		if _, err := git(ctx, root, "tag", "-a", t, "-m", "release "+t); err != nil {
			return nil, err
		}
	}
	return tags, nil
}

// tidyAll runs go mod tidy in every module of the work tree, outside the
// workspace, with the siblings at the version they require served from the
// work tree through a temporary proxy: before the first release that version
// (v0.0.0) is on no proxy, and go mod tidy in a nested module cannot resolve
// it. The go.sum lines of the siblings at that version are then removed: they
// hash this work tree, not a release, and would be stale at the next change.
func tidyAll(ctx context.Context) error {
	root, err := git(ctx, "", "rev-parse", "--show-toplevel")
	if err != nil {
		return err
	}
	mods, err := readModules(root)
	if err != nil {
		return err
	}
	version, err := siblingVersion(root, mods)
	if err != nil {
		return err
	}
	w, err := readWorkTree(ctx, root)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "ipam-tidy-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	defer func() {
		if err := dropFromModCache(w.modcache, mods, version); err != nil {
			fmt.Fprintln(os.Stderr, "release: cleaning the module cache:", err)
		}
	}()
	if err := tidyAndPublish(ctx, root, mods, version, w.files, proxy{Dir: tmp}, w.upstream); err != nil {
		return err
	}
	for _, m := range mods {
		if err := dropSums(filepath.Join(root, filepath.FromSlash(m.Dir), "go.sum"), mods, version); err != nil {
			return err
		}
	}
	return nil
}

// siblingVersion is the one version at which the modules require each
// other.
func siblingVersion(root string, mods []Module) (string, error) {
	version := ""
	for _, m := range mods {
		mf, err := readGoMod(root, m.Dir)
		if err != nil {
			return "", err
		}
		for _, r := range mf.Require {
			for _, s := range m.Siblings {
				if r.Mod.Path != s {
					continue
				}
				if version != "" && r.Mod.Version != version {
					return "", fmt.Errorf("%s/go.mod requires %s, other modules their siblings at %s: run go run ./internal/release with one version", m.Dir, r.Mod, version)
				}
				version = r.Mod.Version
			}
		}
	}
	if version == "" {
		return "", fmt.Errorf("no module requires another")
	}
	return version, nil
}

// dropSums removes from the go.sum file name the lines of mods at version.
func dropSums(name string, mods []Module, version string) error {
	data, err := os.ReadFile(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	mine := map[string]bool{}
	for _, m := range mods {
		mine[m.Path] = true
	}
	var keep strings.Builder
	for line := range strings.Lines(string(data)) {
		f := strings.Fields(line)
		if len(f) == 3 && mine[f[0]] && strings.TrimSuffix(f[1], "/go.mod") == version {
			continue
		}
		keep.WriteString(line)
	}
	return os.WriteFile(name, []byte(keep.String()), 0o644)
}

// A workTree is what publishing the work tree's modules needs: its files,
// and the go command's GOPROXY and module cache.
type workTree struct {
	files              []string
	upstream, modcache string
}

func readWorkTree(ctx context.Context, root string) (w workTree, err error) {
	if w.files, err = trackedFiles(ctx, root); err != nil {
		return w, err
	}
	if w.upstream, err = goEnvVar(ctx, "GOPROXY"); err != nil {
		return w, err
	}
	w.modcache, err = goEnvVar(ctx, "GOMODCACHE")
	return w, err
}

// trackedFiles lists the files a commit of the work tree holds: tracked, and
// new ones git does not ignore (slash-separated, relative to root).
func trackedFiles(ctx context.Context, root string) ([]string, error) {
	out, err := git(ctx, root, "ls-files", "--cached", "--others", "--exclude-standard", "-z")
	if err != nil {
		return nil, err
	}
	var files []string
	for f := range strings.SplitSeq(out, "\x00") {
		if f != "" {
			if _, err := os.Lstat(filepath.Join(root, filepath.FromSlash(f))); err == nil {
				files = append(files, f)
			}
		}
	}
	return files, nil
}

func git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		msg := ""
		if ee, ok := err.(*exec.ExitError); ok {
			msg = string(ee.Stderr)
		}
		return "", fmt.Errorf("git %s: %w\n%s", strings.Join(args, " "), err, msg)
	}
	return strings.TrimRight(string(out), "\n"), nil
}
