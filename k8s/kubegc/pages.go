package kubegc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"

	"github.com/ipamkit/ipam/k8s/internal/kubeerr"
	"github.com/ipamkit/ipam/k8s/kubestore"
	"github.com/ipamkit/ipam/store"
)

// DefaultPageSize is the number of claims of a page when Options.PageSize
// is zero: the page size of kubectl's lists.
const DefaultPageSize = 500

// ClaimPager lists every claim of a Store in pages, so that a full pass
// holds one page of claims at a time rather than every claim of the
// cluster (see Options.Claims).
type ClaimPager interface {
	// ClaimPages calls page with every claim, in pages of at most size
	// claims, in no particular order, each as it was at some point after
	// the call began (IPClaimPages: all at one point, unless the listing
	// outlives the API server's history), and stops at the first error
	// page returns. Records
	// that are no valid claims are left out and reported in the error
	// returned at the end (wrapping store.ErrCorrupt); any other error
	// stops the listing.
	ClaimPages(ctx context.Context, size int, page func([]store.Claim) error) error
}

// IPClaimPages returns a ClaimPager of the IPClaims of the cluster cfg
// names: the claims of every kubestore.Store on that cluster. Each page is
// one list request with a limit and a continue token (served by the API
// server from one snapshot), decoded to claims as it comes, so that a pass
// over 150,000 claims holds about one page of them. A claim read so carries
// its object's resourceVersion as Revision, as kubestore's do, so the
// Allocator releases it as it was judged.
//
// It reads what kubestore writes (the IPClaim's spec, its name as
// kubestore.ClaimName gives it); it belongs in kubestore, as a capability
// of its Store, where the decoding is.
func IPClaimPages(cfg *rest.Config) (ClaimPager, error) {
	if cfg == nil {
		return nil, errors.New("kubegc: nil *rest.Config")
	}
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &schema.GroupVersion{Group: kubestore.Group, Version: kubestore.Version}
	c.APIPath = "/apis"
	c.ContentType = runtime.ContentTypeJSON
	c.AcceptContentTypes = runtime.ContentTypeJSON
	s := runtime.NewScheme()
	metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
	c.NegotiatedSerializer = serializer.NewCodecFactory(s).WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	client, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("kubegc: %w", err)
	}
	return &ipClaimPager{client: client}, nil
}

type ipClaimPager struct {
	client *rest.RESTClient
}

// claimPage is one page of IPClaims, each decoded only as far as a claim
// needs.
type claimPage struct {
	Metadata struct {
		Continue string `json:"continue"`
	} `json:"metadata"`
	Items []claimItem `json:"items"`
}

type claimItem struct {
	Metadata struct {
		Name            string `json:"name"`
		ResourceVersion string `json:"resourceVersion"`
	} `json:"metadata"`
	Spec struct {
		Pool  string `json:"pool"`
		IP    string `json:"ip"`
		Owner struct {
			Namespace   string `json:"namespace"`
			Name        string `json:"name"`
			UID         string `json:"uid"`
			ContainerID string `json:"containerID"`
			Interface   string `json:"interface"`
			Stable      bool   `json:"stable"`
		} `json:"owner"`
		Time string `json:"time"`
	} `json:"spec"`
}

func (p *ipClaimPager) ClaimPages(ctx context.Context, size int, page func([]store.Claim) error) error {
	if size <= 0 {
		return fmt.Errorf("kubegc: page size %d: must be positive", size)
	}
	opts := metav1.ListOptions{Limit: int64(size)}
	var bad []error
	claims := make([]store.Claim, 0, size)
	for {
		res := p.client.Get().Resource(kubestore.ClaimResource).VersionedParams(&opts, metav1.ParameterCodec).Do(ctx)
		err := res.Error() // the API server's Status, decoded (Raw does not)
		raw, _ := res.Raw()
		if cont, ok := expired(err); ok && opts.Continue != "" {
			// The snapshot of the first page is gone (etcd compacted it,
			// after some 5 minutes): go on from the next key at the
			// newest revision, with the token the server gives. The
			// claims after it are listed later than the others, which a
			// pass allows: each is judged on its own, against the
			// snapshot time taken before the first page.
			opts.Continue = cont
			continue
		}
		if err != nil {
			return fmt.Errorf("kubegc: listing IPClaims: %w", kubeerr.Wrap(ctx, err))
		}
		var l claimPage
		if err := json.Unmarshal(raw, &l); err != nil {
			return fmt.Errorf("kubegc: decoding a page of IPClaims: %w", err)
		}
		claims = claims[:0]
		for i := range l.Items {
			c, err := l.Items[i].claim()
			if err != nil {
				bad = append(bad, err)
				continue
			}
			claims = append(claims, c)
		}
		if err := page(claims); err != nil {
			return err
		}
		if l.Metadata.Continue == "" {
			return errors.Join(bad...)
		}
		opts.Continue = l.Metadata.Continue
	}
}

// expired returns the continue token of a 410 answer to a list whose
// continue token has expired, and whether err is one.
func expired(err error) (string, bool) {
	var se *apierrors.StatusError
	if !errors.As(err, &se) || se.ErrStatus.Code != 410 || se.ErrStatus.ListMeta.Continue == "" {
		return "", false
	}
	return se.ErrStatus.ListMeta.Continue, true
}

// claim returns the claim o stores, or an error wrapping store.ErrCorrupt
// if it is none (kubestore's Store reports such objects likewise).
func (o *claimItem) claim() (store.Claim, error) {
	bad := func(field, value string) (store.Claim, error) {
		return store.Claim{}, fmt.Errorf("kubegc: IPClaim %q: %s %q: %w", o.Metadata.Name, field, value, store.ErrCorrupt)
	}
	rev, err := strconv.ParseInt(o.Metadata.ResourceVersion, 10, 64)
	if err != nil || rev <= 0 {
		return bad("metadata.resourceVersion", o.Metadata.ResourceVersion)
	}
	ip, err := netip.ParseAddr(o.Spec.IP)
	if err != nil || o.Spec.Pool == "" {
		return bad("spec", o.Spec.Pool+" "+o.Spec.IP)
	}
	if want, ok := kubestore.ClaimName(ip); !ok || want != o.Metadata.Name {
		return bad("metadata.name", o.Metadata.Name)
	}
	ow := o.Spec.Owner
	c := store.Claim{Pool: o.Spec.Pool, IP: ip, Revision: rev, Owner: store.Owner{Namespace: ow.Namespace, Name: ow.Name,
		UID: ow.UID, ContainerID: ow.ContainerID, Interface: ow.Interface, Stable: ow.Stable}}
	if o.Spec.Time != "" {
		if c.Time, err = time.Parse(time.RFC3339Nano, o.Spec.Time); err != nil {
			return bad("spec.time", o.Spec.Time)
		}
	}
	if c.Owner.IsZero() || c.Owner.Stable && c.Owner.Name == "" {
		return bad("spec.owner", c.Owner.String())
	}
	return c, nil
}
