package hostlocalvectors

import (
	"encoding/json"
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
