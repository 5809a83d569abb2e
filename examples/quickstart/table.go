package main

import (
	"bytes"
	"io"
	"strings"
	"text/tabwriter"
)

// table aligns tab-separated rows into columns, two blanks apart, without
// trailing blanks on any line: write rows to it, then Flush. (It is here, not
// imported, so that this program can be copied out of the repository.)
type table struct {
	*tabwriter.Writer
	buf bytes.Buffer
	out io.Writer
}

// newTable returns an aligned table that writes to out.
func newTable(out io.Writer) *table {
	t := &table{out: out}
	t.Writer = tabwriter.NewWriter(&t.buf, 0, 4, 2, ' ', 0)
	return t
}

// Flush aligns the rows written so far and writes them out.
func (t *table) Flush() error {
	if err := t.Writer.Flush(); err != nil {
		return err
	}
	for line := range strings.Lines(t.buf.String()) {
		if _, err := io.WriteString(t.out, strings.TrimRight(line, " \n")+"\n"); err != nil {
			return err
		}
	}
	t.buf.Reset()
	return nil
}
