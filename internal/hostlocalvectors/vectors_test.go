package hostlocalvectors

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

func TestLoad(t *testing.T) {
	vs, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := LoadDifferences(vs); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadDifferences(vs[:1]); err == nil {
		t.Error("differences naming vectors not loaded: no error")
	}
}

// TestFinalCursors: every vector ends with cursors to check, host-local's or
// the ones a difference states; a random cursor of host-local's must be
// stated, and a stated cursor must differ from host-local's.
func TestFinalCursors(t *testing.T) {
	vs, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	ds, err := LoadDifferences(vs)
	if err != nil {
		t.Fatal(err)
	}
	stated := 0
	for _, v := range vs {
		got, err := v.FinalCursors(ds[v.Name])
		if err != nil {
			t.Fatal(err)
		}
		if ds[v.Name].Cursor != nil {
			stated++
			if fmt.Sprint(got) != fmt.Sprint(ds[v.Name].Cursor) {
				t.Errorf("%s: cursors %v, want the stated %v", v.Name, got, ds[v.Name].Cursor)
			}
		}
	}
	if stated != 8 {
		t.Errorf("%d vectors state our cursors, want the 8 whose cursors differ from host-local's", stated)
	}

	v := Vector{Name: "v"}
	v.FinalState.LastReserved = map[string]string{"0": "10.0.0.2 or 10.0.0.3 (random)"}
	if _, err := v.FinalCursors(Difference{}); err == nil {
		t.Error("a random cursor not stated: no error")
	}
	if got, err := v.FinalCursors(Difference{Cursor: map[string]string{}}); err != nil || len(got) != 0 {
		t.Errorf("stated no cursor: got %v, %v", got, err)
	}
	v.FinalState.LastReserved = map[string]string{"0": "10.0.0.2"}
	same := map[string]Difference{"v": {Why: "w", Cursor: map[string]string{"0": "10.0.0.2"}}}
	if err := checkDifferences(same, []Vector{v}); err == nil || !strings.Contains(err.Error(), "host-local's own cursors") {
		t.Errorf("a stated cursor equal to host-local's: %v", err)
	}
	same["v"].Cursor["0"] = "10.0.0.3"
	if err := checkDifferences(same, []Vector{v}); err != nil {
		t.Errorf("a stated cursor that differs: %v", err)
	}
}

func TestCheckErrorNames(t *testing.T) {
	tests := []struct {
		ours string
		want Expectation
		ok   bool
	}{
		{"pool p: no free address in range set 10.0.0.1-10.0.0.2", Expectation{Error: "no IP addresses available in range set: 10.0.0.1-10.0.0.2"}, true},
		{"pool p: no free address in range set 10.0.0.1-10.0.0.3", Expectation{Error: "no IP addresses available in range set: 10.0.0.1-10.0.0.2"}, false},
		{"requested 10.1.2.9 taken", Expectation{ErrorPrefix: "failed to allocate all requested IPs: 10.1.2."}, true},
		{"requested 10.1.3.9 taken", Expectation{ErrorPrefix: "failed to allocate all requested IPs: 10.1.2."}, false},
		{"No IP ranges specified", Expectation{Error: "no IP ranges specified"}, true},
		{"failed to find address added by container a", Expectation{Error: "host-local: Failed to find address added by container a"}, true},
		{"something else", Expectation{Error: "empty range set"}, false},
	}
	for _, tt := range tests {
		if err := CheckErrorNames(tt.ours, tt.want); (err == nil) != tt.ok {
			t.Errorf("CheckErrorNames(%q, %+v) = %v, want ok %t", tt.ours, tt.want, err, tt.ok)
		}
	}
}

func TestWithRequests(t *testing.T) {
	cfg := json.RawMessage(`{"ipam":{"type":"host-local"}}`)
	if got, _ := WithRequests(cfg, nil); string(got) != string(cfg) {
		t.Errorf("no requests: %s", got)
	}
	got, err := WithRequests(cfg, []string{"10.0.0.5"})
	if err != nil || string(got) != `{"ipam":{"type":"host-local"},"runtimeConfig":{"ips":["10.0.0.5"]}}` {
		t.Errorf("WithRequests = %s, %v", got, err)
	}
}
