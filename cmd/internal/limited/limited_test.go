package limited

import (
	"bytes"
	"errors"
	"testing"
)

// TestRead: up to max bytes are read whole; one more is ErrTooLarge,
// saying the limit.
func TestRead(t *testing.T) {
	for _, tt := range []struct {
		n, max int64
		ok     bool
	}{{0, 0, true}, {10, 10, true}, {11, 10, false}, {4 << 20, MaxFile, true}, {4<<20 + 1, MaxFile, false}} {
		data, err := Read(bytes.NewReader(make([]byte, tt.n)), tt.max)
		switch {
		case tt.ok && (err != nil || int64(len(data)) != tt.n):
			t.Errorf("Read(%d bytes, %d) = %d bytes, %v; want them all", tt.n, tt.max, len(data), err)
		case !tt.ok && !errors.Is(err, ErrTooLarge):
			t.Errorf("Read(%d bytes, %d) = %d bytes, %v; want ErrTooLarge", tt.n, tt.max, len(data), err)
		}
	}
	if _, err := ReadFile("/dev/zero", MaxFile); err == nil || err.Error() != "larger than the limit of 4 MiB" {
		t.Errorf("ReadFile(/dev/zero) = %v, want larger than the limit of 4 MiB", err)
	}
	for n, want := range map[int64]string{4 << 20: "4 MiB", 512 << 10: "512 KiB", 100: "100 bytes", 1<<20 + 1: "1048577 bytes"} {
		if got := Size(n); got != want {
			t.Errorf("Size(%d) = %q, want %q", n, got, want)
		}
	}
}
