package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/module"
	modzip "golang.org/x/mod/zip"
)

// A proxy is a module proxy in a directory, in the layout GOPROXY=file://
// reads: <escaped module path>/@v/{list,<version>.info,.mod,.zip}.
type proxy struct {
	Dir string
}

// URL is the proxy's GOPROXY entry.
func (p proxy) URL() string {
	return "file://" + filepath.ToSlash(p.Dir)
}

// publish adds m at version to the proxy: its go.mod, and its zip made of
// files (paths relative to root, slash-separated; the files of m's directory
// are taken, those of nested modules left out as the go command leaves them
// out), as a module proxy serves the tagged commit.
func (p proxy) publish(root string, m Module, version string, files []string) error {
	var zf []modzip.File
	prefix := ""
	if m.Dir != "." {
		prefix = m.Dir + "/"
	}
	seen := map[string]bool{}
	for _, f := range append(slices.Clone(files), prefix+"go.mod", prefix+"go.sum") {
		rel, ok := strings.CutPrefix(f, prefix)
		if !ok || seen[rel] {
			continue
		}
		full := filepath.Join(root, filepath.FromSlash(f))
		fi, err := os.Lstat(full)
		if errors.Is(err, fs.ErrNotExist) {
			continue // a go.sum of a module without requirements, or a file deleted in the work tree
		}
		if err != nil {
			return err
		}
		seen[rel] = true
		zf = append(zf, zipFile{rel: rel, full: full, info: fi})
	}
	dir := filepath.Join(p.Dir, filepath.FromSlash(escaped(m.Path)), "@v")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var zbuf bytes.Buffer
	if err := modzip.Create(&zbuf, module.Version{Path: m.Path, Version: version}, zf); err != nil {
		return fmt.Errorf("module %s: %w", m.Path, err)
	}
	gomod, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(m.Dir), "go.mod"))
	if err != nil {
		return err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, time.Now().UTC().Truncate(time.Second)})
	if err != nil {
		return err
	}
	for name, data := range map[string][]byte{version + ".zip": zbuf.Bytes(), version + ".mod": gomod, version + ".info": info} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return err
		}
	}
	list, err := os.OpenFile(filepath.Join(dir, "list"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(list, version)
	if cerr := list.Close(); err == nil {
		err = cerr
	}
	return err
}

type zipFile struct {
	rel, full string
	info      fs.FileInfo
}

func (f zipFile) Path() string                 { return f.rel }
func (f zipFile) Lstat() (fs.FileInfo, error)  { return f.info, nil }
func (f zipFile) Open() (io.ReadCloser, error) { return os.Open(f.full) }

// goEnv is the environment of a go command that resolves the repository's
// modules from the proxy alone, outside the workspace: GOWORK=off; GOPROXY
// the proxy first, then upstream (the go command's own GOPROXY, for every
// other module: the file proxy answers 404 for them, which falls through);
// no checksum database for the repository's modules, which it does not know
// (GONOSUMDB; GOPRIVATE and GONOPROXY cleared, as they would send them to
// their VCS); -modcacherw, so that what lands in the module cache can be
// removed; GOTOOLCHAIN=local; CGO_ENABLED=0, as the programs ship (static),
// so that every build shares one build cache configuration.
func (p proxy) goEnv(upstream string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "GOWORK", "GOPROXY", "GONOSUMDB", "GOPRIVATE", "GONOPROXY", "GOFLAGS", "GOTOOLCHAIN":
			continue
		}
		env = append(env, kv)
	}
	return append(env,
		"GOWORK=off",
		"GOPROXY="+p.URL()+","+upstream,
		"GONOSUMDB="+rootPath,
		"GOPRIVATE=",
		"GONOPROXY=",
		"GOFLAGS=-modcacherw",
		"GOTOOLCHAIN=local",
		"CGO_ENABLED=0",
	)
}

// goCmd runs the go command in dir with env and returns its combined output;
// a failure's error carries the command and the output.
func goCmd(ctx context.Context, dir string, env []string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("go %s (in %s): %w\n%s", strings.Join(args, " "), dir, err, out)
	}
	return string(out), nil
}

// goEnvVar is `go env NAME` in the caller's environment.
func goEnvVar(ctx context.Context, name string) (string, error) {
	out, err := goCmd(ctx, "", os.Environ(), "env", name)
	return strings.TrimSpace(out), err
}

// tidyAndPublish runs, for each module of mods in order (requirements
// first), go mod tidy against the proxy, outside the workspace, so that its
// go.sum holds the hashes of its siblings at version as the proxy serves them,
// then publishes it to the proxy for the modules after it.
func tidyAndPublish(ctx context.Context, root string, mods []Module, version string, files []string, p proxy, upstream string) error {
	env := p.goEnv(upstream)
	for _, m := range mods {
		if _, err := goCmd(ctx, filepath.Join(root, filepath.FromSlash(m.Dir)), env, "mod", "tidy"); err != nil {
			return fmt.Errorf("module %s: %w", m.Path, err)
		}
		if err := p.publish(root, m, version, files); err != nil {
			return err
		}
	}
	return nil
}

// dropFromModCache removes what the go command put in the module cache
// modcache for mods at version: the extracted trees, the downloaded files,
// and the version's line in each list. A release's go.sum is computed from
// the proxy of this program; the real proxy serves the tag later, and a test
// version must never be found again.
func dropFromModCache(modcache string, mods []Module, version string) error {
	var errs []error
	for _, m := range mods {
		esc := filepath.FromSlash(escaped(m.Path))
		errs = append(errs, os.RemoveAll(filepath.Join(modcache, esc+"@"+version)))
		dl := filepath.Join(modcache, "cache", "download", esc, "@v")
		for _, ext := range []string{".info", ".mod", ".zip", ".ziphash", ".lock", ".partial"} {
			if err := os.Remove(filepath.Join(dl, version+ext)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
		}
		list := filepath.Join(dl, "list")
		data, err := os.ReadFile(list)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var keep []string
		for line := range strings.Lines(string(data)) {
			if strings.TrimSpace(line) != version {
				keep = append(keep, line)
			}
		}
		if len(keep) == 0 {
			errs = append(errs, os.Remove(list))
		} else {
			errs = append(errs, os.WriteFile(list, []byte(strings.Join(keep, "")), 0o644))
		}
	}
	return errors.Join(errs...)
}
