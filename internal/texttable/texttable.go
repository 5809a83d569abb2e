// Package texttable aligns tab-separated rows into columns, as the example
// commands print them, without trailing blanks on any line.
package texttable

import (
	"bytes"
	"io"
	"strings"
	"text/tabwriter"
)

// Table is an aligned table: write tab-separated rows to it, then Flush. The
// zero Table is not usable; call New. A Table is not safe for concurrent use.
type Table struct {
	*tabwriter.Writer
	buf bytes.Buffer
	out io.Writer
}

// New returns a table that writes to out, columns two blanks apart.
func New(out io.Writer) *Table {
	t := &Table{out: out}
	t.Writer = tabwriter.NewWriter(&t.buf, 0, 4, 2, ' ', 0)
	return t
}

// Flush aligns the rows written so far and writes them out.
func (t *Table) Flush() error {
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
