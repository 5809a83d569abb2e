package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/quickstart.golden from the current output")

const golden = "testdata/quickstart.golden"

// TestGolden runs the walk-through on the embedded cluster.json and compares
// its output with the golden file. Regenerate with
// go test ./examples/quickstart -update.
func TestGolden(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out, clusterJSON); err != nil {
		t.Fatalf("run: %v", err)
	}
	if *update {
		if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test ./examples/quickstart -update to create it)", err)
	}
	if got := out.String(); got != string(want) {
		t.Errorf("output differs from %s (run with -update if the change is intended)\n--- got\n%s\n--- want\n%s", golden, got, want)
	}
}

// TestDeterministic checks that two runs print the same thing.
func TestDeterministic(t *testing.T) {
	var a, b bytes.Buffer
	if err := run(&a, clusterJSON); err != nil {
		t.Fatal(err)
	}
	if err := run(&b, clusterJSON); err != nil {
		t.Fatal(err)
	}
	if a.String() != b.String() {
		t.Errorf("two runs differ:\n%s\n---\n%s", a.String(), b.String())
	}
}

// TestBadCluster checks that an unusable cluster file is an error naming the
// field and the value at fault, and that nothing is printed for it.
func TestBadCluster(t *testing.T) {
	const pod = `{"namespace":"default","name":"web-0","uid":"u1","interfaces":[{"name":"eth0","pools":["a"]}]}`
	tests := []struct {
		name string
		data string
		want []string
	}{
		{
			name: "subnet with a bad prefix length",
			data: `{"pools":[{"name":"a","ranges":[{"subnet":"10.10.0.0/33"}]}],"pods":[` + pod + `]}`,
			want: []string{"pools[0]", "subnet", `"10.10.0.0/33"`},
		},
		{
			name: "spider pool with host bits in the subnet",
			data: `{"pools":[{"name":"a","subnet":"10.20.0.5/24","ips":["10.20.0.10"]}],"pods":[` + pod + `]}`,
			want: []string{"pools[0]", "subnet", "10.20.0.5/24"},
		},
		{
			name: "unknown strategy",
			data: `{"pools":[{"name":"a","ranges":[{"subnet":"10.10.0.0/24"}],"strategy":"random"}],"pods":[` + pod + `]}`,
			want: []string{"strategy", "random"},
		},
		{
			name: "bad requested address",
			data: `{"pools":[{"name":"a","ranges":[{"subnet":"10.10.0.0/24"}]}],"pods":[{"namespace":"default","name":"web-0","uid":"u1","interfaces":[{"name":"eth0","pools":["a"],"ips":["10.10.0.300"]}]}]}`,
			want: []string{"pods[0].interfaces[0].ips[0]", `"10.10.0.300"`},
		},
		{
			name: "misspelt field",
			data: `{"pools":[{"name":"a","ranges":[{"subnet":"10.10.0.0/24"}]}],"podz":[]}`,
			want: []string{`"podz"`},
		},
		{
			name: "wrong JSON type",
			data: `{"pools":[{"name":"a","ranges":[{"subnet":"10.10.0.0/24"}]}],"pods":[{"name":"web-0","interfaces":"eth0"}]}`,
			want: []string{"pods.interfaces", "string"},
		},
		{
			name: "no pools",
			data: `{"pods":[]}`,
			want: []string{"pools"},
		},
		{
			name: "malformed JSON",
			data: `{"pools":[`,
			want: []string{"cluster"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			err := run(&out, []byte(tt.data))
			if err == nil {
				t.Fatalf("run succeeded, printing:\n%s", out.String())
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			if out.Len() != 0 {
				t.Errorf("printed output for a bad cluster file:\n%s", out.String())
			}
		})
	}
}
