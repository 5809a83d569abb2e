package texttable

import (
	"bytes"
	"fmt"
	"testing"
)

func TestTable(t *testing.T) {
	var out bytes.Buffer
	tw := New(&out)
	fmt.Fprintln(tw, "NAME\tADDRESS\tNOTE")
	fmt.Fprintln(tw, "web-0\t10.0.0.2/24\t")
	if err := tw.Flush(); err != nil {
		t.Fatal(err)
	}
	want := "NAME   ADDRESS      NOTE\nweb-0  10.0.0.2/24\n"
	if out.String() != want {
		t.Errorf("got %q, want %q", out.String(), want)
	}
}
