package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestFlags: defaults are usable, bad values are refused with the flag and
// the value named, --version prints the build's version.
func TestFlags(t *testing.T) {
	c, _, err := parseFlags(nil, &bytes.Buffer{})
	if err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if !c.gc || !c.subnet || !c.usage || c.lowFreePercent != 10 || !c.leaderElect || c.listen != ":8080" || c.leaseName != "ipam-controller" {
		t.Errorf("defaults: %+v", c)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--gc-period", "0s"}, `--gc-period 0s: must be positive`},
		{[]string{"--gc-additional-grace-delay", "-1s"}, `--gc-additional-grace-delay -1s: negative`},
		{[]string{"--subnet-kinds", "StatefulSet,Pod"}, `--subnet-kinds: kind "Pod"`},
		{[]string{"--lease-duration", "5s"}, `--lease-duration 5s, --renew-deadline 10s`},
		{[]string{"--kube-api-qps", "0"}, `--kube-api-qps 0: must be positive`},
		{[]string{"--log-level", "loud"}, `--log-level "loud"`},
		{[]string{"--gc=false", "--subnet=false", "--usage=false"}, `nothing to run`},
		{[]string{"--usage-interval", "0s"}, `--usage-interval 0s: must be positive`},
		{[]string{"--pool-low-free-percent", "120"}, `--pool-low-free-percent 120: want more than 0, at most 100`},
		{[]string{"--pool-low-free-percent", "0"}, `--pool-low-free-percent 0:`},
		{[]string{"extra"}, `unexpected argument "extra"`},
	} {
		_, _, err := parseFlags(tc.args, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want it to contain %q", tc.args, err, tc.want)
		}
	}
	// Without an election, its timing is not checked.
	if _, _, err := parseFlags([]string{"--leader-elect=false", "--lease-duration", "1s"}, &bytes.Buffer{}); err != nil {
		t.Errorf("--leader-elect=false: %v", err)
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"--version"}, &out, &errOut); code != 0 || !strings.HasPrefix(out.String(), "ipam-controller ") {
		t.Errorf("--version: status %d, %q %q", code, out.String(), errOut.String())
	}
	if code := run([]string{"--gc-period", "-1s"}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "--gc-period -1s") {
		t.Errorf("bad flag: status %d, stderr %q", code, errOut.String())
	}
}
