package main

import (
	"bytes"
	"io"
	"path/filepath"
	"strings"
)

// pluginName is the name kubectl looks for to run "kubectl ipam": a
// program named kubectl-ipam on the PATH (a copy of ipamctl, or a link to
// it).
const pluginName = "kubectl-ipam"

// progName returns how the program introduces itself, given its argv[0]:
// "kubectl ipam" when it runs as the kubectl plugin, "ipamctl" otherwise.
func progName(argv0 string) string {
	base := strings.TrimSuffix(filepath.Base(argv0), ".exe")
	if base == pluginName {
		return "kubectl ipam"
	}
	return "ipamctl"
}

// renamer writes to w what is written to it, with "ipamctl" at the start
// of a line (after a newline or a carriage return) written as to: every
// message of ipamctl starts its line with its name ("ipamctl explain: ...",
// "ipamctl: note: ..."). A message is written by one Write call, so a name
// is never split between two. The zero renamer is not usable; a renamer is
// not safe for concurrent use.
type renamer struct {
	w       io.Writer
	to      string
	midLine bool // the last byte written was not a line end
}

func (r *renamer) Write(p []byte) (int, error) {
	var out bytes.Buffer
	rest := p
	for len(rest) > 0 {
		if !r.midLine && bytes.HasPrefix(rest, []byte("ipamctl")) {
			out.WriteString(r.to)
			rest = rest[len("ipamctl"):]
			if len(rest) == 0 {
				r.midLine = true
				break
			}
		}
		i := bytes.IndexAny(rest, "\n\r")
		if i < 0 {
			out.Write(rest)
			r.midLine = true
			break
		}
		out.Write(rest[:i+1])
		rest = rest[i+1:]
		r.midLine = false
	}
	if _, err := r.w.Write(out.Bytes()); err != nil {
		return 0, err
	}
	return len(p), nil
}
