package subnet

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"go4.org/netipx"

	"github.com/ipamkit/ipam"
)

// fieldErrors collects the *ipam.FieldError problems of one object.
type fieldErrors struct {
	object string
	errs   []error
}

func (fe *fieldErrors) add(field, value, reason string, args ...any) {
	if len(args) > 0 {
		reason = fmt.Sprintf(reason, args...)
	}
	fe.errs = append(fe.errs, &ipam.FieldError{Object: fe.object, Field: field, Value: value, Reason: reason})
}

func (fe *fieldErrors) err() error { return errors.Join(fe.errs...) }

// withValidation returns the problems of parsing (fe) joined with those of
// validating what did parse (verr), so that one bad value does not hide the
// problems of the others; a field that did not parse is not reported again.
func (fe *fieldErrors) withValidation(verr error) error {
	if verr == nil {
		return fe.err()
	}
	bad := make(map[string]bool, len(fe.errs))
	for _, e := range fe.errs {
		var f *ipam.FieldError
		if errors.As(e, &f) {
			bad[f.Field] = true
		}
	}
	for _, e := range unjoin(verr) {
		var f *ipam.FieldError
		if errors.As(e, &f) && bad[f.Field] {
			continue
		}
		fe.errs = append(fe.errs, e)
	}
	return fe.err()
}

// unjoin returns the errors err joins, or err alone.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// validateObjectName checks the name of a subnet as a pool's is checked:
// required, at most 253 characters, no white space.
func validateObjectName(fe *fieldErrors, name string) {
	if name == "" {
		fe.add("name", "", "required")
	} else if len(name) > 253 || strings.ContainsAny(name, " \t\r\n") {
		fe.add("name", name, "must be at most 253 characters without white space")
	}
}

// poolObject names p in problems, as the root package does.
func poolObject(p *ipam.Pool) string {
	if p.Name == "" {
		return "pool"
	}
	return fmt.Sprintf("pool %q", p.Name)
}

// annotation builds the *ipam.AnnotationError problems of one annotation.
type annotation struct{ key, value string }

func (a annotation) newError(reason string, err error) *ipam.AnnotationError {
	return ipam.NewAnnotationError(a.key, a.value, reason, err)
}

// setAnnotationObject names the object of every *ipam.AnnotationError err is
// or joins.
func setAnnotationObject(err error, object string) {
	switch e := err.(type) {
	case *ipam.AnnotationError:
		e.Object = object
	case interface{ Unwrap() []error }:
		for _, x := range e.Unwrap() {
			setAnnotationObject(x, object)
		}
	}
}

func jsonIndex(i int) string { return "[" + strconv.Itoa(i) + "]" }

func familyOf(a netip.Addr) int {
	if a.Is4() {
		return 4
	}
	return 6
}

func rangesContain(rs []netipx.IPRange, ip netip.Addr) bool {
	for _, r := range rs {
		if r.Contains(ip) {
			return true
		}
	}
	return false
}

// formatIPRanges writes single addresses without "-", as Spiderpool does.
func formatIPRanges(rs []netipx.IPRange) []string {
	var out []string
	for _, r := range rs {
		if r.From() == r.To() {
			out = append(out, r.From().String())
		} else {
			out = append(out, r.String())
		}
	}
	return out
}

// Error says why an application's auto-pool for one interface and IP
// family cannot be created, resized, deleted or served. It unwraps to
// ipam.ErrNotReady (retry later), ipam.ErrInvalid (fix the application's
// annotations or the subnet), ipam.ErrNotFound (no such subnet) or
// ipam.ErrNotSupported.
//
// The zero Error is not useful; Decide and the Manager build them. An Error
// is not modified after it is returned, so it is safe to read from several
// goroutines.
type Error struct {
	// App is the application; zero for a pod without a controller.
	App ipam.AppRef
	// Pod names the pod, as "namespace/name", when a pod's request failed.
	Pod string
	// Interface and Family say which pool; empty and 0 when the problem is
	// the application's as a whole.
	Interface string
	Family    int
	// Subnet and Pool name the subnet and the pool concerned, when known.
	Subnet string
	Pool   string
	// Reason says what is wrong, in lower case, naming the annotation or
	// field and its value when they are the cause.
	Reason string
	// Err is the sentinel.
	Err error
}

// Error returns, for example, `Deployment default/app eth0 IPv4: subnet
// "subnet-6": 5 free addresses, 6 wanted: retry when addresses are free`.
func (e *Error) Error() string {
	var b strings.Builder
	switch {
	case e.Pod != "" && e.App.IsZero():
		b.WriteString("pod " + e.Pod)
	case e.Pod != "":
		b.WriteString("pod " + e.Pod + " of " + e.App.String())
	default:
		b.WriteString(e.App.String())
	}
	if e.Interface != "" {
		b.WriteString(" " + e.Interface)
	}
	if e.Family != 0 {
		fmt.Fprintf(&b, " IPv%d", e.Family)
	}
	b.WriteString(": ")
	if e.Subnet != "" {
		fmt.Fprintf(&b, "subnet %q: ", e.Subnet)
	}
	if e.Pool != "" {
		fmt.Fprintf(&b, "pool %q: ", e.Pool)
	}
	b.WriteString(e.Reason)
	return b.String()
}

// Unwrap returns Err.
func (e *Error) Unwrap() error { return e.Err }
