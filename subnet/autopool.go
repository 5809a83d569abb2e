package subnet

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"go4.org/netipx"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/internal/k8slabel"
	"github.com/ipamkit/ipam/internal/u128"
)

// This file holds what SpiderSubnet's auto-created pools are made of: the
// applications that ask for them (AppRef, Application), the annotations they
// ask with (Config, IPNumber), and the pools themselves (AutoPool),
// with the names, labels and pod affinity Spiderpool gives them. What to do
// about them is decided in decide.go.

// Annotation keys of SpiderSubnet, read on an application's pod template.
const (
	// AnnotationIPNumber sizes an auto-pool: "N" addresses, or "+N" more than
	// the application has pods.
	AnnotationIPNumber = "ipam.spidernet.io/ippool-ip-number"
	// AnnotationReclaim says whether an application's auto-pools are deleted
	// with it: "true" (the default) or "false".
	AnnotationReclaim = "ipam.spidernet.io/ippool-reclaim"
)

// Labels Spiderpool puts on the pools a subnet controls. A pool with
// LabelOwnerAppName is an auto-pool.
const (
	LabelOwnerSubnet       = "ipam.spidernet.io/owner-spider-subnet"
	LabelOwnerAppGV        = "ipam.spidernet.io/owner-application-gv"
	LabelOwnerAppKind      = "ipam.spidernet.io/owner-application-kind"
	LabelOwnerAppNamespace = "ipam.spidernet.io/owner-application-namespace"
	LabelOwnerAppName      = "ipam.spidernet.io/owner-application-name"
	LabelOwnerAppUID       = "ipam.spidernet.io/owner-application-uid"
	LabelInterface         = "ipam.spidernet.io/interface"
	LabelIPVersion         = "ipam.spidernet.io/ip-version"
	LabelReclaim           = "ipam.spidernet.io/ippool-reclaim"
	LabelCIDR              = "ipam.spidernet.io/ippool-cidr"
)

// Finalizer is the finalizer Spiderpool puts on every pool, so that a
// pool is deleted only once no pod holds an address of it.
const Finalizer = "spiderpool.spidernet.io"

// gvLabel returns the value of LabelOwnerAppGV: "apps_v1", or "v1" for the
// core group.
func gvLabel(r ipam.AppRef) string {
	if g := r.Group(); g != "" {
		return g + "_" + r.Version()
	}
	return r.Version()
}

// validate checks that r names an application: every field set.
func validateApp(r ipam.AppRef, fe *fieldErrors) {
	for _, f := range [...]struct{ name, v string }{
		{"apiVersion", r.APIVersion}, {"kind", r.Kind}, {"namespace", r.Namespace}, {"name", r.Name}, {"uid", r.UID},
	} {
		if f.v == "" {
			fe.add(f.name, "", "required")
		}
	}
	if strings.Count(r.APIVersion, "/") > 1 {
		fe.add("apiVersion", r.APIVersion, `want "group/version" or "version"`)
		return
	}
	// Each part goes into a label of the pool, or its podAffinity.
	for _, f := range [...]struct{ name, v string }{
		{"apiVersion", r.Group()}, {"apiVersion", r.Version()}, {"kind", r.Kind}, {"namespace", r.Namespace}, {"name", r.Name}, {"uid", r.UID},
	} {
		if f.v == "" {
			continue
		}
		v := k8slabel.Value(f.v)
		if f.name == "uid" {
			v = f.v // written as it is, and looked up by
		}
		if p := k8slabel.ValueProblem(v); p != "" {
			v = f.v
			if f.name == "apiVersion" {
				v = r.APIVersion
			}
			fe.add(f.name, v, "cannot be written in a label: %s", p)
		}
	}
}

// appLabels returns the labels an auto-pool's podAffinity matches against
// the application of a pod: LabelAppAPIGroup, LabelAppAPIVersion,
// LabelAppKind, LabelAppNamespace and LabelAppName. Values longer than a
// label value may be (63 characters) are shortened as k8slabel.Value does.
func appLabels(r ipam.AppRef) map[string]string {
	return map[string]string{
		ipam.LabelAppAPIGroup:   k8slabel.Value(r.Group()),
		ipam.LabelAppAPIVersion: k8slabel.Value(r.Version()),
		ipam.LabelAppKind:       k8slabel.Value(r.Kind),
		ipam.LabelAppNamespace:  k8slabel.Value(r.Namespace),
		ipam.LabelAppName:       k8slabel.Value(r.Name),
	}
}

// Application is an application whose pods may ask for auto-pools: its
// top-controller reference, the annotations of its pod template, and what it
// says about its pod count.
//
// The zero Application is invalid. It is a plain value; Annotations is read,
// never written.
type Application struct {
	ipam.AppRef
	// Annotations are the pod template's annotations: the subnet
	// annotations, AnnotationIPNumber and AnnotationReclaim.
	Annotations map[string]string
	// HostNetwork is the pod template's spec.hostNetwork: such pods get no
	// pool.
	HostNetwork bool
	// Replicas is spec.replicas of a Deployment, ReplicaSet or StatefulSet;
	// unset counts as 1, the API server's default. For a third-party
	// controller it is the replica count of its scale subresource, when the
	// caller could read one; unset means unknown.
	Replicas *int
	// DesiredNumberScheduled is a DaemonSet's status.desiredNumberScheduled.
	DesiredNumberScheduled int
	// Completions and Parallelism are a Job's spec fields, or a CronJob's
	// spec.jobTemplate.spec fields.
	Completions, Parallelism *int
}

// PodCount returns how many pods the application runs, as Spiderpool counts
// them, and whether that is known:
//
//   - Deployment, ReplicaSet, StatefulSet: Replicas (unset is 1);
//   - DaemonSet: DesiredNumberScheduled;
//   - Job, CronJob: Completions if set, else Parallelism if set, else 1; a
//     set 0 counts as 1;
//   - a third-party controller: Replicas if set, else unknown (Spiderpool
//     counts 0, see Decide).
func (a *Application) PodCount() (n int, known bool) {
	if !a.IsNative() {
		if a.Replicas == nil {
			return 0, false
		}
		return *a.Replicas, true
	}
	switch a.Kind {
	case "DaemonSet":
		return a.DesiredNumberScheduled, true
	case "Job", "CronJob":
		switch {
		case a.Completions != nil:
			return max(*a.Completions, 1), true
		case a.Parallelism != nil:
			return max(*a.Parallelism, 1), true
		}
		return 1, true
	}
	if a.Replicas == nil {
		return 1, true
	}
	return *a.Replicas, true
}

// Validate checks that the application is named (every field of AppRef set)
// and that its counts are not negative. Its annotations are checked by
// ParseConfig.
func (a *Application) Validate() error {
	fe := &fieldErrors{object: "application"}
	if a.Kind != "" && a.Name != "" {
		fe.object = "application " + a.AppRef.String()
	}
	validateApp(a.AppRef, fe)
	for _, c := range [...]struct {
		field string
		v     *int
	}{{"replicas", a.Replicas}, {"completions", a.Completions}, {"parallelism", a.Parallelism}, {"desiredNumberScheduled", &a.DesiredNumberScheduled}} {
		if c.v != nil && *c.v < 0 {
			fe.add(c.field, strconv.Itoa(*c.v), "negative")
		}
	}
	return fe.err()
}

// IPNumber is the value of AnnotationIPNumber: a fixed number of addresses
// ("5"), or a number of addresses beyond the application's pod count ("+1").
//
// The zero IPNumber is "0", a fixed size of no address. It is a plain value.
type IPNumber struct {
	N int
	// Relative marks "+N": the pod count plus N.
	Relative bool
}

// maxIPNumber bounds N: no subnet hands out more addresses to one pool in
// practice, and it keeps sums far from overflow.
const maxIPNumber = 1 << 24

// ParseIPNumber parses "N" or "+N", N a decimal number from 0 to 16777216.
// Errors are *AnnotationError values (Key AnnotationIPNumber) that unwrap to
// ErrInvalid and say what is wrong, as Spiderpool does: "++1" and "abc" are
// invalid input, "-1" is below 0.
func ParseIPNumber(s string) (IPNumber, error) {
	fail := func(reason string) (IPNumber, error) {
		a := annotation{key: AnnotationIPNumber, value: s}
		return IPNumber{}, a.newError(reason, ipam.ErrInvalid)
	}
	var n IPNumber
	digits := s
	if rest, ok := strings.CutPrefix(s, "+"); ok {
		n.Relative, digits = true, rest
	}
	if strings.HasPrefix(digits, "-") && digits != "-" && strings.Trim(digits[1:], "0123456789") == "" && !n.Relative {
		return fail("value must be 0 or greater")
	}
	if digits == "" || strings.Trim(digits, "0123456789") != "" {
		return fail(`invalid input: want "N" (a fixed number of addresses) or "+N" (N more than the application's pods), N a decimal number`)
	}
	v, err := strconv.Atoi(digits)
	if err != nil || v > maxIPNumber {
		return fail(fmt.Sprintf("invalid input: at most %d addresses", maxIPNumber))
	}
	n.N = v
	return n, nil
}

// String returns "N" or "+N".
func (n IPNumber) String() string {
	if n.Relative {
		return "+" + strconv.Itoa(n.N)
	}
	return strconv.Itoa(n.N)
}

// MarshalText implements encoding.TextMarshaler.
func (n IPNumber) MarshalText() ([]byte, error) { return []byte(n.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler with ParseIPNumber.
func (n *IPNumber) UnmarshalText(b []byte) error {
	v, err := ParseIPNumber(string(b))
	if err != nil {
		return err
	}
	*n = v
	return nil
}

// Size returns the number of addresses for an application of podCount pods.
func (n IPNumber) Size(podCount int) int {
	if n.Relative {
		return podCount + n.N
	}
	return n.N
}

// Config is what an application's pod template annotations ask of
// SpiderSubnet.
//
// The zero Config asks for nothing. It is a plain value.
type Config struct {
	// Key is the annotation the subnets come from: AnnotationSubnets, which
	// wins, or AnnotationSubnet.
	Key string
	// Subnets lists, per interface, the subnet of each family (the first
	// name of each, as Spiderpool uses). The single form's interface
	// defaults to "eth0".
	Subnets []ipam.NICSubnets
	// IPNumber is the value of AnnotationIPNumber, when HasIPNumber.
	IPNumber    IPNumber
	HasIPNumber bool
	// Reclaim is the value of AnnotationReclaim; true when it is absent.
	Reclaim bool
}

// ParseConfig reads the SpiderSubnet annotations of a pod template.
// It reports whether the template asks for auto-pools (it has
// AnnotationSubnets or AnnotationSubnet) and returns every problem at once:
// the subnet annotations' (see ParseSubnetsAnnotation and
// ParseSubnetAnnotation), a malformed AnnotationIPNumber (ParseIPNumber), and
// an AnnotationReclaim that is not a boolean (strconv.ParseBool's forms).
// Errors are *AnnotationError values, joined when there are several, that
// unwrap to ErrInvalid.
func ParseConfig(annotations map[string]string) (cfg Config, ok bool, err error) {
	var errs []error
	if v, has := annotations[ipam.AnnotationSubnets]; has {
		cfg.Key = ipam.AnnotationSubnets
		cfg.Subnets, err = ipam.ParseSubnetsAnnotation(v)
	} else if v, has := annotations[ipam.AnnotationSubnet]; has {
		cfg.Key = ipam.AnnotationSubnet
		var a ipam.NICSubnets
		if a, err = ipam.ParseSubnetAnnotation(v); err == nil {
			cfg.Subnets = []ipam.NICSubnets{a}
		}
	} else {
		return Config{}, false, nil
	}
	if err != nil {
		errs = append(errs, err)
	}
	if v, has := annotations[AnnotationIPNumber]; has {
		if cfg.IPNumber, err = ParseIPNumber(v); err != nil {
			errs = append(errs, err)
		}
		cfg.HasIPNumber = true
	}
	cfg.Reclaim = true
	if v, has := annotations[AnnotationReclaim]; has {
		b, perr := strconv.ParseBool(v)
		if perr != nil {
			a := annotation{key: AnnotationReclaim, value: v}
			errs = append(errs, a.newError(`invalid input: want "true" or "false"`, ipam.ErrInvalid))
		}
		cfg.Reclaim = b || perr != nil
	}
	if len(errs) > 0 {
		return Config{}, true, joinErrors(errs)
	}
	return cfg, true, nil
}

// joinErrors returns the one error of errs, or errs joined.
func joinErrors(errs []error) error {
	if len(errs) == 1 {
		return errs[0]
	}
	return errors.Join(errs...)
}

// AutoPool is a pool SpiderSubnet created for one interface and IP family of
// an application: the SpiderIPPool spec (Pool) and what Spiderpool writes in
// its metadata (see Labels, Annotations, Finalizer, and a controller
// owner reference to the SpiderSubnet named Subnet).
//
// The zero AutoPool is not useful; Decide builds them and
// ParseAutoPool reads them back. Treat an AutoPool as immutable once shared.
type AutoPool struct {
	// Pool is the spec: name, ipVersion, subnet (the CIDR), ips, gateway and
	// routes copied from the subnet, and a podAffinity whose matchLabels
	// are the application's five ipam.LabelApp* keys (see ipam.IsAutoPool).
	Pool *ipam.Pool
	// Subnet names the SpiderSubnet the addresses come from.
	Subnet string
	// App is the application the pool serves.
	App ipam.AppRef
	// Interface is the pod interface the pool serves, such as "eth0".
	Interface string
	// Reclaim says whether the pool goes with its application.
	Reclaim bool
	// IPNumber is what the pool was sized by (annotation AnnotationIPNumber
	// of the pool).
	IPNumber IPNumber
}

// Name returns the pool's name.
func (a *AutoPool) Name() string { return a.Pool.Name }

// Family returns 4 or 6.
func (a *AutoPool) Family() int { return a.Pool.Family() }

// Size returns the number of the pool's addresses, or math.MaxInt if it
// has more (an IPv6 pool may). The decisions count them exactly.
func (a *AutoPool) Size() int { return clampInt(a.count()) }

// count returns the number of the pool's addresses (see setCount).
func (a *AutoPool) count() u128.U128 { return setCount(a.Pool.Addresses()) }

// Labels returns the labels Spiderpool puts on an auto-pool.
func (a *AutoPool) Labels() map[string]string {
	return map[string]string{
		LabelOwnerSubnet:       a.Subnet,
		LabelOwnerAppGV:        k8slabel.Value(gvLabel(a.App)),
		LabelOwnerAppKind:      k8slabel.Value(a.App.Kind),
		LabelOwnerAppNamespace: k8slabel.Value(a.App.Namespace),
		LabelOwnerAppName:      k8slabel.Value(a.App.Name),
		LabelOwnerAppUID:       a.App.UID,
		LabelInterface:         k8slabel.Value(a.Interface),
		LabelIPVersion:         "IPv" + strconv.Itoa(a.Family()),
		LabelReclaim:           strconv.FormatBool(a.Reclaim),
		LabelCIDR:              cidrLabel(a.Pool.Subnet),
	}
}

// Annotations returns the annotations Spiderpool puts on an auto-pool:
// AnnotationIPNumber with the value it was sized by.
func (a *AutoPool) Annotations() map[string]string {
	return map[string]string{AnnotationIPNumber: a.IPNumber.String()}
}

// ParseAutoPool reads back an auto-pool from a SpiderIPPool's spec, labels
// and annotations. It reports whether the pool is an auto-pool (it has the
// label LabelOwnerAppName, Spiderpool's test) and returns every problem with
// the labels and annotations at once. An application name longer than 63
// characters comes back shortened, as the pool's labels write it (its first
// 57 characters, "-" and five hexadecimal digits of its SHA-256).
func ParseAutoPool(p *ipam.Pool, labels, annotations map[string]string) (*AutoPool, bool, error) {
	if _, ok := labels[LabelOwnerAppName]; !ok || p == nil {
		return nil, false, nil
	}
	fe := &fieldErrors{object: poolObject(p)}
	a := &AutoPool{Pool: p, Subnet: labels[LabelOwnerSubnet], Interface: labels[LabelInterface], Reclaim: true}
	a.App = ipam.AppRef{Kind: labels[LabelOwnerAppKind], Namespace: labels[LabelOwnerAppNamespace],
		Name: labels[LabelOwnerAppName], UID: labels[LabelOwnerAppUID]}
	gv := labels[LabelOwnerAppGV]
	if g, v, ok := strings.Cut(gv, "_"); ok {
		a.App.APIVersion = g + "/" + v
	} else {
		a.App.APIVersion = gv
	}
	for _, k := range [...]string{LabelOwnerSubnet, LabelOwnerAppGV, LabelOwnerAppKind, LabelOwnerAppNamespace, LabelOwnerAppName, LabelOwnerAppUID, LabelInterface} {
		if labels[k] == "" {
			fe.add("metadata.labels."+k, "", "required on an auto-pool")
		}
	}
	if v, ok := labels[LabelReclaim]; ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			fe.add("metadata.labels."+LabelReclaim, v, `want "true" or "false"`)
		}
		a.Reclaim = b || err != nil
	}
	if v, ok := labels[LabelIPVersion]; ok && v != "IPv"+strconv.Itoa(p.Family()) {
		fe.add("metadata.labels."+LabelIPVersion, v, "does not match the pool's IP family IPv%d", p.Family())
	}
	if v, ok := annotations[AnnotationIPNumber]; ok {
		n, err := ParseIPNumber(v)
		if err != nil {
			fe.add("metadata.annotations."+AnnotationIPNumber, v, "%s", err.(*ipam.AnnotationError).Reason)
		}
		a.IPNumber = n
	} else {
		a.IPNumber = IPNumber{N: a.Size()}
	}
	if err := fe.err(); err != nil {
		return nil, true, err
	}
	return a, true, nil
}

// ValidateAutoPoolUpdate checks a change of an auto-pool from old to new by
// Spiderpool's admission rules for auto-pools: the addresses (ips less
// excludeIPs) must stay what SpiderSubnet gave it (users cannot edit them),
// and podAffinity must stay exactly the application's five matchLabels. It
// returns every problem at once.
func ValidateAutoPoolUpdate(old, new *AutoPool) error {
	if old == nil || new == nil || old.Pool == nil || new.Pool == nil {
		return &ipam.FieldError{Object: "auto-pool", Field: "(pool)", Reason: "nil pool"}
	}
	fe := &fieldErrors{object: poolObject(new.Pool)}
	was, now := old.Pool.Addresses(), new.Pool.Addresses()
	if !slices.Equal(was.Ranges(), now.Ranges()) {
		fe.add("ips", strings.Join(formatIPRanges(now.Ranges()), ","),
			"the addresses of an auto-created pool are SpiderSubnet's to set: want %s", strings.Join(formatIPRanges(was.Ranges()), ","))
	}
	want := autoPoolAffinity(old.App)
	if got := new.Pool.PodAffinity; got == nil || len(got.MatchExpressions) > 0 || !maps.Equal(got.MatchLabels, want.MatchLabels) {
		v := "null"
		if got != nil {
			v = got.String()
		}
		fe.add("podAffinity", v, "an auto-created pool's podAffinity is its application's matchLabels %s and nothing else", want.String())
	}
	return fe.err()
}

// autoPoolAffinity returns the podAffinity of an auto-pool of app.
func autoPoolAffinity(app ipam.AppRef) *ipam.LabelSelector {
	return &ipam.LabelSelector{MatchLabels: appLabels(app)}
}

// AutoPoolNames returns the names the decisions try, in order, for a new
// auto-pool of an application's interface and IP family. The first is
// Spiderpool's: "auto<family>-<application name>-<interface>-<uid5>",
// lower-cased, where uid5 is the first five characters of the last
// dash-separated block of the application's UID, so that applications of
// different kinds with one name get different pools. The application name is
// cut so that the whole name has at most 253 characters (Spiderpool's cut
// leaves 254, which the API server refuses), and dots and dashes at the cut
// are dropped, so that the name stays a DNS subdomain. It is an error if the
// result is not one (an interface name with characters a pool name cannot
// hold, say).
//
// Then come the same with the whole last block of the UID instead of its
// first five characters (for a UUID, twelve), and with sixteen hexadecimal
// digits of the SHA-256 of the whole UID, which tells distinct UIDs apart
// but for a hash collision: two applications whose UIDs share those five
// characters, such as two Deployments "web" in two namespaces, both get a
// pool. A new pool takes the first name no pool has and no other decision
// of the same call takes; Spiderpool has only the first, and its second
// application waits forever. Pools are found by their labels (the
// application's UID), never by their name, so a longer name serves as well.
func AutoPoolNames(family int, app ipam.AppRef, iface string) ([]string, error) {
	first, err := spiderpoolName(family, app, iface)
	if err != nil {
		return nil, err
	}
	out := []string{first}
	if long := uidTail(app.UID, -1); len(long) > 5 {
		if n, err := autoPoolName(family, app, iface, long); err == nil && n != first {
			out = append(out, n)
		}
	}
	sum := sha256.Sum256([]byte(app.UID))
	if n, err := autoPoolName(family, app, iface, hex.EncodeToString(sum[:8])); err == nil && !slices.Contains(out, n) {
		out = append(out, n)
	}
	return out, nil
}

// spiderpoolName returns the first of AutoPoolNames: Spiderpool's name.
func spiderpoolName(family int, app ipam.AppRef, iface string) (string, error) {
	return autoPoolName(family, app, iface, uidTail(app.UID, 5))
}

// uidTail returns the first n characters (all, if n < 0) of the last
// dash-separated block of uid.
func uidTail(uid string, n int) string {
	if i := strings.LastIndexByte(uid, '-'); i >= 0 {
		uid = uid[i+1:]
	}
	if n >= 0 {
		uid = uid[:min(len(uid), n)]
	}
	return uid
}

// autoPoolName returns "auto<family>-<application name>-<interface>-<tag>",
// lower-cased and cut as AutoPoolNames says.
func autoPoolName(family int, app ipam.AppRef, iface, tag string) (string, error) {
	prefix := "auto" + strconv.Itoa(family) + "-"
	suffix := "-" + strings.ToLower(iface) + "-" + strings.ToLower(tag)
	name := strings.ToLower(app.Name)
	if room := 253 - len(prefix) - len(suffix); len(name) > room {
		name = strings.TrimRight(name[:max(room, 0)], ".-")
	}
	full := prefix + name + suffix
	if name == "" || len(full) > 253 || !k8slabel.IsDNSSubdomain(full) {
		return "", &ipam.FieldError{Object: "auto-pool of " + app.String(), Field: "name", Value: full,
			Reason: "not a valid pool name (a DNS subdomain of at most 253 characters): check the interface name and the application's name and uid"}
	}
	return full, nil
}

// newAutoPool builds the auto-pool of app's interface iface and IP family
// from subnet s, with addresses ips.
func newAutoPool(name string, s *Subnet, app ipam.AppRef, iface string, cfg *Config, n IPNumber, ips []netipx.IPRange) *AutoPool {
	p := &ipam.Pool{
		Name:        name,
		IPVersion:   s.Family(),
		Subnet:      s.Subnet,
		IPs:         ips,
		Gateway:     s.Gateway,
		Routes:      slices.Clone(s.Routes),
		PodAffinity: autoPoolAffinity(app),
	}
	return &AutoPool{Pool: p, Subnet: s.Name, App: app, Interface: iface, Reclaim: cfg.Reclaim, IPNumber: n}
}
