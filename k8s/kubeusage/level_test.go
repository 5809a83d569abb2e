package kubeusage

import (
	"testing"

	"github.com/ipamkit/ipam"
)

// TestLevel: the threshold and its hysteresis, by share and by count; a
// pool that can hand out nothing is never low.
func TestLevel(t *testing.T) {
	usage := func(capacity, reserved, free uint64) ipam.Usage {
		return ipam.Usage{Capacity: ipam.Size{}.Add(capacity), Reserved: ipam.Size{}.Add(reserved), Free: ipam.Size{}.Add(free)}
	}
	for _, c := range []struct {
		name           string
		opts           Options
		u              ipam.Usage
		low, recovered bool
	}{
		{"100, 10 free: at the threshold, not below", Options{}, usage(100, 0, 10), false, false},
		{"100, 9 free", Options{}, usage(100, 0, 9), true, false},
		{"100, 14 free: not yet recovered", Options{}, usage(100, 0, 14), false, false},
		{"100, 15 free: recovered", Options{}, usage(100, 0, 15), false, true},
		{"reserved count out: 110 less 10, 9 free", Options{}, usage(110, 10, 9), true, false},
		{"10, 1 free", Options{}, usage(10, 0, 1), false, false},
		{"10, 0 free", Options{}, usage(10, 0, 0), true, false},
		{"10, 2 free: one address above the threshold and more", Options{}, usage(10, 0, 2), false, true},
		{"all reserved", Options{}, usage(10, 10, 0), false, true},
		{"empty", Options{}, usage(0, 0, 0), false, true},
		{"25 %: 100, 24 free", Options{LowFreePercent: 25}, usage(100, 0, 24), true, false},
		{"count 5: 1000, 4 free", Options{LowFreeAddresses: 5}, usage(1000, 0, 4), true, false},
		{"count 5: 1000, 7 free", Options{LowFreeAddresses: 5}, usage(1000, 0, 7), false, false},
		{"count 5: 1000, 8 free", Options{LowFreeAddresses: 5}, usage(1000, 0, 8), false, true},
	} {
		low, rec := c.opts.level(c.u)
		if low != c.low || rec != c.recovered {
			t.Errorf("%s: low %v, recovered %v; want %v, %v", c.name, low, rec, c.low, c.recovered)
		}
	}
}

// TestValidate names the field and its value.
func TestValidate(t *testing.T) {
	for _, o := range []Options{{Interval: -1}, {LowFreePercent: -1}, {LowFreePercent: 101}} {
		if err := o.Validate(); err == nil {
			t.Errorf("%+v: no error", o)
		} else {
			t.Log(err)
		}
	}
	if err := (Options{}).Validate(); err != nil {
		t.Error(err)
	}
}
