// Command release prepares and tags a release of every published module of
// the repository at one version.
//
// From the root of a clean clone:
//
//	go run ./internal/release v0.1.0          # edit go.mod, go.sum and go.work
//	go run ./internal/release -tag v0.1.0     # the same, then commit and tag
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
// Which modules are published is the table in modules.go; the README's
// "Releasing" section says why. TestRelease runs the same steps on a copy of
// the repository and fetches the result as a user would.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

func main() {
	tag := flag.Bool("tag", false, "commit the changes and tag each published module")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: go run ./internal/release [-tag] vX.Y.Z\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(context.Background(), flag.Arg(0), *tag); err != nil {
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
	files, err := trackedFiles(ctx, root)
	if err != nil {
		return nil, err
	}
	upstream, err := goEnvVar(ctx, "GOPROXY")
	if err != nil {
		return nil, err
	}
	modcache, err := goEnvVar(ctx, "GOMODCACHE")
	if err != nil {
		return nil, err
	}
	defer func() {
		if derr := dropFromModCache(modcache, mods, version); derr != nil && err == nil {
			err = fmt.Errorf("cleaning the module cache: %w", derr)
		}
	}()
	if err := setVersion(root, mods, version); err != nil {
		return nil, err
	}
	if err := tidyAndPublish(ctx, root, mods, version, files, p, upstream); err != nil {
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
