package filestore

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/ipamkit/ipam/store"
)

const (
	// lockName is the file host-local flocks.
	lockName = "lock"
	// cursorPrefix starts the name of a pool's cursor file, last_reserved_ip.<index>.
	cursorPrefix = "last_reserved_ip."
	// tmpPrefix starts the name of this package's temporary files. A name that
	// starts with a dot never parses as an IP address.
	tmpPrefix = ".tmp-"
	// separator separates the container ID from the interface name in a claim file.
	separator = "\r\n"
	// maxFileSize is the largest claim or cursor file read: a container ID and
	// an interface name are short, and a larger file is corrupt.
	maxFileSize = 4096
)

// content returns the bytes of o's claim file: "<containerID>\r\n<ifname>", or
// "<containerID>" without an interface.
func content(o store.Owner) []byte {
	b := make([]byte, 0, len(o.ContainerID)+len(separator)+len(o.Interface))
	b = append(b, o.ContainerID...)
	if o.Interface != "" {
		b = append(b, separator...)
		b = append(b, o.Interface...)
	}
	return b
}

// parseContent reads a claim file's content as host-local does: with surrounding
// whitespace trimmed, "<containerID>\r\n<ifname>" or the legacy "<containerID>".
// It returns why the content is not a claim as a reason for a CorruptError.
func parseContent(data []byte) (store.Owner, string) {
	if len(data) == 0 {
		return store.Owner{}, "empty file"
	}
	if !utf8.Valid(data) {
		return store.Owner{}, fmt.Sprintf("content %s is not valid UTF-8", quote(data))
	}
	s := strings.TrimSpace(string(data))
	if s == "" {
		return store.Owner{}, fmt.Sprintf("content %s is only whitespace", quote(data))
	}
	id, iface, _ := strings.Cut(s, separator)
	if strings.Contains(iface, separator) {
		return store.Owner{}, fmt.Sprintf("content %s has more than two lines", quote(data))
	}
	if !isToken(id) {
		return store.Owner{}, fmt.Sprintf("content %s: container ID %q contains whitespace or a control character", quote(data), id)
	}
	if !isToken(iface) {
		return store.Owner{}, fmt.Sprintf("content %s: interface %q contains whitespace or a control character", quote(data), iface)
	}
	return store.Owner{ContainerID: id, Interface: iface}, ""
}

// quote quotes a file's content for an error message, cut short if long.
func quote(data []byte) string {
	const max = 64
	if len(data) > max {
		return strconv.Quote(string(data[:max])) + "..."
	}
	return strconv.Quote(string(data))
}

// isToken reports whether s is valid UTF-8 with no whitespace or control
// characters, so that it survives host-local's TrimSpace and its line split.
func isToken(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return false
		}
	}
	return true
}

// checkOwner reports every reason o cannot be written in host-local's format.
func checkOwner(o store.Owner) error {
	var errs []error
	unsupported := func(field, value string) {
		errs = append(errs, fmt.Errorf("owner.%s %s: the format keeps only the container ID and interface: %w",
			field, value, ErrUnsupportedOwner))
	}
	if o.Namespace != "" {
		unsupported("namespace", strconv.Quote(o.Namespace))
	}
	if o.Name != "" {
		unsupported("name", strconv.Quote(o.Name))
	}
	if o.UID != "" {
		unsupported("uid", strconv.Quote(o.UID))
	}
	if o.Stable {
		unsupported("stable", "true")
	}
	switch {
	case o.ContainerID == "":
		errs = append(errs, fmt.Errorf("owner.containerID is empty: the format identifies an owner by its container ID: %w",
			ErrUnsupportedOwner))
	case !isToken(o.ContainerID):
		errs = append(errs, fmt.Errorf("owner.containerID %q: not valid UTF-8, or contains whitespace or a control character",
			o.ContainerID))
	}
	if !isToken(o.Interface) {
		errs = append(errs, fmt.Errorf("owner.interface %q: not valid UTF-8, or contains whitespace or a control character",
			o.Interface))
	}
	if n := len(o.ContainerID) + len(separator) + len(o.Interface); n > maxFileSize {
		errs = append(errs, fmt.Errorf("owner.containerID and owner.interface take %d bytes, more than %d", n, maxFileSize))
	}
	return errors.Join(errs...)
}

// claimName parses a directory entry's name as a claimed address. It reports
// ok false for names that are not addresses at all (lock, last_reserved_ip.*,
// temporary files, anything else, and zoned addresses, which host-local cannot
// parse). For a name that is an address but not in the canonical form
// ip.String() that host-local writes ("2001:DB8::1", "::ffff:10.0.0.1"), it
// returns the address and why the name is wrong.
func claimName(name string) (ip netip.Addr, bad string, ok bool) {
	ip, err := netip.ParseAddr(name)
	if err != nil || ip.Zone() != "" {
		return netip.Addr{}, "", false
	}
	switch {
	case ip.Is4In6():
		return ip.Unmap(), fmt.Sprintf("names %s in its IPv4-mapped IPv6 form", ip.Unmap()), true
	case ip.String() != name:
		return ip, fmt.Sprintf("names %s in non-canonical form", ip), true
	}
	return ip, "", true
}
