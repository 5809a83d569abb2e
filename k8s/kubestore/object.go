package kubestore

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ipamkit/ipam/store"
)

// The custom resources of the Store: its API group and version, and the
// resources (plural names) of its kinds, IPClaim, IPOwner and IPCursor.
// Their CustomResourceDefinitions are in the repository's k8s/config/crd.
const (
	Group           = "ipam.ipamkit.io"
	Version         = "v1alpha1"
	ClaimResource   = "ipclaims"
	OwnerResource   = "ipowners"
	CursorResource  = "ipcursors"
	claimKind       = "IPClaim"
	ownerKind       = "IPOwner"
	cursorKind      = "IPCursor"
	groupAPIVersion = Group + "/" + Version
)

// claimObject is an IPClaim as it travels: one claim, named by ClaimName.
type claimObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              claimSpec `json:"spec"`
}

// claimSpec is an IPClaim's spec. Its fields are spelled out here rather
// than taken from store.Owner, so that the stored form changes only with
// the CRD's schema.
type claimSpec struct {
	Pool  string    `json:"pool"`
	IP    string    `json:"ip"`
	Owner ownerSpec `json:"owner"`
	Time  string    `json:"time,omitempty"`
}

type ownerSpec struct {
	Namespace   string `json:"namespace,omitempty"`
	Name        string `json:"name,omitempty"`
	UID         string `json:"uid,omitempty"`
	ContainerID string `json:"containerID,omitempty"`
	Interface   string `json:"interface,omitempty"`
	Stable      bool   `json:"stable,omitempty"`
}

// objectList is a list of objects of any kind, each left undecoded so that
// one bad object spoils only itself.
type objectList struct {
	Metadata metav1.ListMeta   `json:"metadata"`
	Items    []json.RawMessage `json:"items"`
}

// CorruptError says why an object in the cluster is not a valid claim (or
// cursor). It unwraps to store.ErrCorrupt. The object's name stays taken: a
// Create of the address it names fails with store.ErrExists.
type CorruptError struct {
	// Name is the object's name.
	Name string
	// Field is the path of the bad field, such as "spec.ip".
	Field string
	// Value is the bad field's value, as text.
	Value string
	// Reason says what is wrong with it.
	Reason string
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("kubestore: %s %q: %s %q: %s", claimKind, e.Name, e.Field, e.Value, e.Reason)
}

// Unwrap returns store.ErrCorrupt.
func (e *CorruptError) Unwrap() error { return store.ErrCorrupt }

// newClaimObject makes the object that stores c under name, with the labels
// that find it by pool and by owner, and the token of its owner index
// entries (empty: none). It carries no resourceVersion: a create must not
// (the API server refuses it), and Update sets one.
func newClaimObject(name string, c store.Claim, token string) *claimObject {
	labels := map[string]string{LabelPool: labelValue(c.Pool), LabelIP: ipValue(c.IP)}
	if c.Owner.UID != "" {
		labels[LabelUID] = labelValue(c.Owner.UID)
	}
	if c.Owner.Stable {
		labels[LabelStable] = stableValue(c.Owner.Namespace, c.Owner.Name)
	}
	if c.Owner.ContainerID != "" {
		labels[LabelContainer] = labelValue(c.Owner.ContainerID)
	}
	o := &claimObject{
		TypeMeta:   metav1.TypeMeta{APIVersion: groupAPIVersion, Kind: claimKind},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: claimSpec{
			Pool: c.Pool,
			IP:   c.IP.String(),
			Owner: ownerSpec{
				Namespace:   c.Owner.Namespace,
				Name:        c.Owner.Name,
				UID:         c.Owner.UID,
				ContainerID: c.Owner.ContainerID,
				Interface:   c.Owner.Interface,
				Stable:      c.Owner.Stable,
			},
		},
	}
	if !c.Time.IsZero() {
		o.Spec.Time = c.Time.UTC().Format(time.RFC3339Nano)
	}
	if token != "" {
		o.Annotations = map[string]string{AnnotationToken: token}
	}
	return o
}

// storedClaim is what the Store reads of a stored IPClaim: the metadata it
// uses, and the spec. Decoding into it skips the rest of the metadata
// (managedFields above all, often half the object), which a watch would
// otherwise decode for every change, in every Store that follows the pool.
type storedClaim struct {
	Metadata storedMeta `json:"metadata"`
	Spec     claimSpec  `json:"spec"`
}

type storedMeta struct {
	Name            string    `json:"name"`
	ResourceVersion string    `json:"resourceVersion"`
	UID             types.UID `json:"uid"`
	// Labels are decoded only when checked (checkLabels): a watch, which
	// decodes every change, has no use for them.
	Labels      json.RawMessage `json:"labels"`
	Annotations struct {
		Token string `json:"ipam.ipamkit.io/token"`
	} `json:"annotations"`
}

// decodeClaim decodes one IPClaim and checks it (see claim).
func decodeClaim(raw []byte) (store.Claim, *storedClaim, error) {
	return decodeClaimNamed(raw, addressName)
}

// decodeClaimNamed is decodeClaim for objects named by named: ClaimName,
// or LegacyClaimName's form for Migrate.
func decodeClaimNamed(raw []byte, named func(pool string, ip netip.Addr) (string, bool)) (store.Claim, *storedClaim, error) {
	o := &storedClaim{}
	if err := json.Unmarshal(raw, o); err != nil {
		var name struct {
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		_ = json.Unmarshal(raw, &name) // best effort, for the message
		return store.Claim{}, nil, &CorruptError{Name: name.Metadata.Name, Field: "(object)", Value: truncate(string(raw)), Reason: err.Error()}
	}
	c, err := o.claimNamed(named)
	return c, o, err
}

// claim returns the claim o stores, or a *CorruptError naming the first
// field that makes it no valid claim: a resourceVersion that is not a
// positive decimal, a missing pool, an address that does not parse, a name
// that is not the one ClaimName gives for spec.ip, a time that is not RFC
// 3339, an owner without pod UID or container ID, a stable owner without a
// name.
func (o *storedClaim) claim() (store.Claim, error) { return o.claimNamed(addressName) }

// addressName is ClaimName in the form claimNamed takes.
func addressName(_ string, ip netip.Addr) (string, bool) { return ClaimName(ip) }

// claimNamed is claim for an object named by named.
func (o *storedClaim) claimNamed(named func(pool string, ip netip.Addr) (string, bool)) (store.Claim, error) {
	bad := func(field, value, reason string) (store.Claim, error) {
		return store.Claim{}, &CorruptError{Name: o.Metadata.Name, Field: field, Value: value, Reason: reason}
	}
	rev, ok := parseRevision(o.Metadata.ResourceVersion)
	if !ok {
		return bad("metadata.resourceVersion", o.Metadata.ResourceVersion, "not a positive decimal integer")
	}
	if o.Spec.Pool == "" {
		return bad("spec.pool", "", "empty")
	}
	ip, err := netip.ParseAddr(o.Spec.IP)
	if err != nil {
		return bad("spec.ip", o.Spec.IP, "not an IP address")
	}
	if want, ok := named(o.Spec.Pool, ip); !ok || want != o.Metadata.Name {
		reason := fmt.Sprintf("not the name of address %s (%q)", ip, want)
		if legacy, _ := LegacyClaimName(o.Spec.Pool, ip); legacy == o.Metadata.Name {
			reason = fmt.Sprintf("the name of pool %q address %s before claims were named by address: run %s", o.Spec.Pool, ip, MigrateCommand)
		}
		return bad("metadata.name", o.Metadata.Name, reason)
	}
	c := store.Claim{
		Pool: o.Spec.Pool,
		IP:   ip,
		Owner: store.Owner{
			Namespace:   o.Spec.Owner.Namespace,
			Name:        o.Spec.Owner.Name,
			UID:         o.Spec.Owner.UID,
			ContainerID: o.Spec.Owner.ContainerID,
			Interface:   o.Spec.Owner.Interface,
			Stable:      o.Spec.Owner.Stable,
		},
		Revision: rev,
	}
	if o.Spec.Time != "" {
		if c.Time, err = time.Parse(time.RFC3339Nano, o.Spec.Time); err != nil {
			return bad("spec.time", o.Spec.Time, "not an RFC 3339 time")
		}
	}
	switch {
	case c.Owner.IsZero():
		return bad("spec.owner", c.Owner.String(), "has neither uid nor containerID")
	case c.Owner.Stable && c.Owner.Name == "":
		return bad("spec.owner.name", "", "empty for a stable owner")
	}
	return c, nil
}

// checkLabels reports, as a *CorruptError, a label of o that disagrees with
// the claim it stores: the index a reader found it by would then find it
// where it does not belong, or miss it where it does.
func (o *storedClaim) checkLabels(c store.Claim) error {
	want := newClaimObject(o.Metadata.Name, c, "").Labels
	var labels map[string]string
	if len(o.Metadata.Labels) > 0 {
		if err := json.Unmarshal(o.Metadata.Labels, &labels); err != nil {
			return &CorruptError{Name: o.Metadata.Name, Field: "metadata.labels", Value: truncate(string(o.Metadata.Labels)), Reason: err.Error()}
		}
	}
	for _, key := range []string{LabelPool, LabelIP, LabelUID, LabelStable, LabelContainer} {
		if got := labels[key]; got != want[key] {
			return &CorruptError{Name: o.Metadata.Name, Field: "metadata.labels[" + key + "]", Value: got,
				Reason: fmt.Sprintf("does not match the claim (want %q)", want[key])}
		}
	}
	return nil
}

// truncate shortens s for an error message.
func truncate(s string) string {
	const max = 200
	if len(s) <= max {
		return s
	}
	return s[:max] + "..."
}

// errNoName is returned for an address ClaimName cannot name.
var errNoName = errors.New("the address cannot be stored: it is not valid or has an IPv6 zone")
