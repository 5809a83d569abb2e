// Package cmd_test checks what the READMEs tell a user to type.
package cmd_test

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestREADMECommands takes every go command the repository's Markdown files
// show (in sh blocks and in inline code) and runs it in a fresh copy of the
// repository: the files git tracks, and new ones it does not ignore, nothing
// else (no build output, no module other than the proxy's). Build and install
// lines build, with -o and GOBIN redirected to a directory of the test's;
// go run lines of the programs (cmd/, examples/) run; other go run lines
// build; go test and go vet lines must name packages that exist. Every
// relative link must name a file of the copy.
func TestREADMECommands(t *testing.T) {
	if testing.Short() {
		t.Skip("copies the repository and builds its programs")
	}
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	fresh := freshCopy(t, root)
	bin := t.TempDir()

	docs, err := filepath.Glob(filepath.Join(fresh, "*.md"))
	require.NoError(t, err)
	more, err := filepath.Glob(filepath.Join(fresh, "*", "*", "*.md"))
	require.NoError(t, err)
	docs = append(docs, more...)
	more, err = filepath.Glob(filepath.Join(fresh, "*", "*.md"))
	require.NoError(t, err)
	docs = append(docs, more...)

	ran := 0
	for _, doc := range docs {
		rel, _ := filepath.Rel(fresh, doc)
		cmds, links := readDoc(t, doc)
		for _, l := range links {
			target := filepath.Join(filepath.Dir(doc), l.target)
			_, err := os.Stat(target)
			require.NoErrorf(t, err, "%s:%d: link %q", rel, l.line, l.target)
		}
		for _, c := range cmds {
			t.Run(strings.ReplaceAll(rel, "/", "_")+":"+strconv.Itoa(c.line), func(t *testing.T) {
				ran++
				runDocCommand(t, fresh, bin, c)
			})
		}
	}
	require.NotZero(t, ran, "no go command found in %d Markdown files", len(docs))
}

// docCommand is a command shown in a Markdown file.
type docCommand struct {
	line int
	text string
}

type docLink struct {
	line   int
	target string
}

var (
	inlineCode = regexp.MustCompile("`([^`]+)`")
	mdLink     = regexp.MustCompile(`\]\(([^)#]+)(#[^)]*)?\)`)
	goCommand  = regexp.MustCompile(`^(cd \S+ && )?(CGO_ENABLED=0 )?go (build|install|run|test|vet) `)
)

// readDoc returns the go commands and ./ipamctl lines of a Markdown file, in
// order, and its relative links.
func readDoc(t *testing.T, path string) ([]docCommand, []docLink) {
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var cmds []docCommand
	var links []docLink
	inSh, inCode, n := false, false, 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		n++
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "```") {
			if inCode {
				inCode, inSh = false, false
			} else {
				inCode, inSh = true, trimmed == "```sh"
			}
			continue
		}
		switch {
		case inSh:
			if goCommand.MatchString(trimmed) || strings.HasPrefix(trimmed, "./ipamctl ") {
				cmds = append(cmds, docCommand{n, trimmed})
			}
		case !inCode:
			for _, m := range inlineCode.FindAllStringSubmatch(line, -1) {
				if goCommand.MatchString(m[1]) {
					cmds = append(cmds, docCommand{n, m[1]})
				}
			}
			for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
				if !strings.Contains(m[1], "://") {
					links = append(links, docLink{n, m[1]})
				}
			}
		}
	}
	require.NoError(t, sc.Err())
	return cmds, links
}

// runDocCommand runs one documented command in the fresh copy.
func runDocCommand(t *testing.T, fresh, bin string, c docCommand) {
	dir, text := fresh, c.text
	if rest, ok := strings.CutPrefix(text, "cd "); ok {
		sub, cmd, _ := strings.Cut(rest, " && ")
		dir, text = filepath.Join(fresh, sub), cmd
	}
	env := os.Environ()
	if rest, ok := strings.CutPrefix(text, "CGO_ENABLED=0 "); ok {
		env, text = append(env, "CGO_ENABLED=0"), rest
	}
	args := shellWords(text)
	name := args[0]
	switch {
	case name == "./ipamctl":
		// After the build line before it, in the copy's root.
	case args[1] == "build":
		for i := range args {
			if args[i] == "-o" && i+1 < len(args) {
				args[i+1] = filepath.Join(bin, filepath.Base(args[i+1]))
				if filepath.Base(args[i+1]) == "ipamctl" {
					args[i+1] = filepath.Join(fresh, "ipamctl") // ./ipamctl runs it next
				}
			}
		}
	case args[1] == "install":
		env = append(env, "GOBIN="+bin)
	case args[1] == "run":
		pkg := args[2]
		if !strings.HasPrefix(pkg, "./cmd/") && !strings.HasPrefix(pkg, "./examples/") {
			args = []string{"go", "build", "-o", os.DevNull, pkg}
		}
	case args[1] == "test" || args[1] == "vet":
		var pkgs []string
		for _, a := range args[2:] {
			if strings.HasPrefix(a, "./") || a == "." {
				pkgs = append(pkgs, a)
			}
		}
		args = append([]string{"go", "list", "-e=false"}, pkgs...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	if name == "./ipamctl" {
		cmd.Path = filepath.Join(fresh, "ipamctl")
	}
	cmd.Dir, cmd.Env = dir, env
	out, err := cmd.CombinedOutput()
	require.NoErrorf(t, err, "%s (run as %q in %s):\n%s", c.text, args, dir, out)
}

// shellWords splits a command line on blanks, removing single quotes.
func shellWords(s string) []string {
	var words []string
	var cur strings.Builder
	quoted, inWord := false, false
	for _, r := range s {
		switch {
		case r == '\'':
			quoted, inWord = !quoted, true
		case r == ' ' && !quoted:
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}

// freshCopy copies what a clone of root would hold: the files git tracks
// and the new files it does not ignore, as they are in the working tree.
func freshCopy(t *testing.T, root string) string {
	out, err := exec.Command("git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	require.NoError(t, err, "git ls-files: the test needs a git checkout")
	dst := t.TempDir()
	for name := range strings.SplitSeq(strings.TrimRight(string(out), "\x00"), "\x00") {
		src := filepath.Join(root, name)
		st, err := os.Lstat(src)
		if os.IsNotExist(err) {
			continue // deleted in the working tree, not yet in git
		}
		require.NoError(t, err)
		if !st.Mode().IsRegular() {
			continue
		}
		require.NoError(t, os.MkdirAll(filepath.Join(dst, filepath.Dir(name)), 0o755))
		copyFile(t, src, filepath.Join(dst, name), st.Mode().Perm())
	}
	return dst
}

func copyFile(t *testing.T, src, dst string, perm os.FileMode) {
	in, err := os.Open(src)
	require.NoError(t, err)
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	require.NoError(t, err)
	_, err = io.Copy(out, in)
	require.NoError(t, err)
	require.NoError(t, out.Close())
}
