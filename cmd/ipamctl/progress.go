package main

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"golang.org/x/term"
)

// progress writes a line on stderr about long work, such as "ipamctl: read
// 12,000 of ~150,000 pods", so that a user of a large cluster sees that
// ipamctl is working. Nothing is written in the first progressDelay, so
// short work says nothing. On a terminal the line is rewritten in place
// (\r) at most every progressTerminal; otherwise a new line is written at
// most every progressLines. --quiet writes nothing. The zero progress
// writes nothing; a progress is not safe for concurrent use.
type progress struct {
	w        io.Writer
	now      func() time.Time
	terminal bool // rewrite one line in place
	quiet    bool // --quiet

	start, last time.Time
	shown       bool // something was written
	pending     bool // a line is on a terminal without its newline
}

const (
	progressDelay    = time.Second
	progressTerminal = 200 * time.Millisecond
	progressLines    = 5 * time.Second
)

// newProgress returns a progress writing to w at the times now gives; on
// a terminal when w is one.
func newProgress(w io.Writer, now func() time.Time) *progress {
	p := &progress{w: w, now: now, start: now()}
	if f, ok := w.(*os.File); ok {
		p.terminal = term.IsTerminal(int(f.Fd()))
	}
	return p
}

// report says that done of what have been read, of about total (0: not
// known), if it is time to say it.
func (p *progress) report(done, total int, what string) {
	if p == nil || p.w == nil || p.quiet {
		return
	}
	t := p.now()
	every := progressLines
	if p.terminal {
		every = progressTerminal
	}
	if t.Sub(p.start) < progressDelay || p.shown && t.Sub(p.last) < every {
		return
	}
	p.last, p.shown = t, true
	msg := "ipamctl: read " + thousands(done)
	if total > 0 {
		msg += " of ~" + thousands(total)
	}
	msg += " " + what
	if p.terminal {
		// \033[K clears what a longer line left behind.
		fmt.Fprint(p.w, "\r"+msg+"\033[K")
		p.pending = true
		return
	}
	fmt.Fprintln(p.w, msg)
}

// end ends the line left on a terminal, before other output follows.
func (p *progress) end() {
	if p != nil && p.pending {
		fmt.Fprintln(p.w)
		p.pending = false
	}
}

// thousands writes n with commas between groups of three digits: 12,000.
func thousands(n int) string {
	s := strconv.Itoa(n)
	neg := n < 0
	if neg {
		s = s[1:]
	}
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	if neg {
		return "-" + string(out)
	}
	return string(out)
}
