// Package limited reads files up to a size limit: the programs of this
// module read configuration files that a careless or hostile value can
// point at a device that never ends (/dev/zero) or a file of gigabytes, and
// must answer with an error that names it, not run out of memory.
package limited

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
)

// MaxFile is the limit of a configuration file: a kubeconfig, a PEM file,
// a resolv.conf, a CNI network config. The largest real ones are tens of
// kilobytes.
const MaxFile = 4 << 20

// ErrTooLarge is returned, wrapped, for a file over the limit.
var ErrTooLarge = errors.New("larger than the limit")

// ReadFile returns the content of the file at path, reading at most max
// bytes: a larger file is an error that wraps ErrTooLarge and says the
// limit. The error names no path: the caller names the file and its field.
func ReadFile(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Read(f, max)
}

// Read reads r to its end, but at most max bytes; more is an error that
// wraps ErrTooLarge.
func Read(r io.Reader, max int64) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("%w of %s", ErrTooLarge, Size(max))
	}
	return data, nil
}

// Size writes n bytes as a person reads it: 4 MiB, 512 KiB, 100 bytes.
func Size(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.FormatInt(n>>20, 10) + " MiB"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.FormatInt(n>>10, 10) + " KiB"
	}
	return strconv.FormatInt(n, 10) + " bytes"
}
