package kubetest

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
)

// establishedGrace is how long after a CRD becomes Established the API
// server delays creates of its objects by two seconds each (a guard for HA
// skew in apiextensions-apiserver's customresource_handler.go).
const establishedGrace = 2 * time.Second

// InstallCRDs creates the CustomResourceDefinitions in manifests (YAML or
// JSON, several documents each allowed) and returns when every one is
// Established and served, and creates of its objects are no longer delayed:
// the API server sleeps two seconds in each create made less than two
// seconds after its CRD became Established, so InstallCRDs waits that out
// once, for all of them. A CRD that already exists (after StartAPI, or
// installed twice) is waited for, not changed.
//
// Install every CRD a test package needs in one call from TestMain.
func (s *Server) InstallCRDs(ctx context.Context, manifests ...[]byte) error {
	var crds []*apiextensionsv1.CustomResourceDefinition
	for i, m := range manifests {
		got, err := decodeCRDs(m)
		if err != nil {
			return fmt.Errorf("kubetest: manifest %d: %w", i, err)
		}
		crds = append(crds, got...)
	}
	cfg := s.Config()
	client, err := clientset.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("kubetest: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("kubetest: %w", err)
	}
	crdClient := client.ApiextensionsV1().CustomResourceDefinitions()
	for _, crd := range crds {
		if _, err := crdClient.Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("kubetest: creating CRD %s: %w", crd.Name, err)
		}
	}
	var latest time.Time
	for _, crd := range crds {
		established, err := waitEstablished(ctx, crdClient, dyn, crd)
		if err != nil {
			return err
		}
		if established.After(latest) {
			latest = established
		}
	}
	// The condition's time is kept to the second, rounded down: waiting
	// from it waits at least as long as the server does.
	if d := time.Until(latest.Add(establishedGrace)); d > 0 {
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return fmt.Errorf("kubetest: waiting for new CRDs to accept creates: %w", ctx.Err())
		}
	}
	return nil
}

type crdGetter interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*apiextensionsv1.CustomResourceDefinition, error)
}

// waitEstablished polls until crd is Established and a list of its storage
// version succeeds, and returns when it became Established.
func waitEstablished(ctx context.Context, crds crdGetter, dyn dynamic.Interface, crd *apiextensionsv1.CustomResourceDefinition) (time.Time, error) {
	var version string
	for _, v := range crd.Spec.Versions {
		if v.Served && (version == "" || v.Storage) {
			version = v.Name
		}
	}
	gvr := schema.GroupVersionResource{Group: crd.Spec.Group, Version: version, Resource: crd.Spec.Names.Plural}
	var last error
	for {
		got, err := crds.Get(ctx, crd.Name, metav1.GetOptions{})
		if err == nil {
			err = fmt.Errorf("not established yet")
			for _, c := range got.Status.Conditions {
				if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
					if _, err = dyn.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 1}); err == nil {
						return c.LastTransitionTime.Time, nil
					}
				}
			}
		}
		last = err
		select {
		case <-time.After(pollInterval):
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("kubetest: waiting for CRD %s: %w (last: %v)", crd.Name, ctx.Err(), last)
		}
	}
}

// decodeCRDs reads every CustomResourceDefinition in a YAML or JSON stream.
func decodeCRDs(manifest []byte) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifest), 4096)
	var crds []*apiextensionsv1.CustomResourceDefinition
	for {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		err := dec.Decode(crd)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if crd.Kind == "" && crd.Name == "" {
			continue // an empty document
		}
		if crd.Kind != "CustomResourceDefinition" {
			return nil, fmt.Errorf("kind %q is not CustomResourceDefinition", crd.Kind)
		}
		crds = append(crds, crd)
	}
	if len(crds) == 0 {
		return nil, errors.New("no CustomResourceDefinition in it")
	}
	return crds, nil
}

//go:embed testdata/spiderpool/*.yaml
var spiderpoolFS embed.FS

// SpiderpoolCRDs returns the CustomResourceDefinitions of Spiderpool v1.2.1
// that pool sources read: SpiderIPPool, SpiderReservedIP and SpiderSubnet
// (spiderpool.spidernet.io/v2beta1), as its Helm chart ships them, for
// InstallCRDs.
func SpiderpoolCRDs() [][]byte {
	var out [][]byte
	entries, err := fs.ReadDir(spiderpoolFS, "testdata/spiderpool")
	if err != nil {
		panic(err) // embedded at build time
	}
	for _, e := range entries {
		b, err := spiderpoolFS.ReadFile(path.Join("testdata/spiderpool", e.Name()))
		if err != nil {
			panic(err)
		}
		out = append(out, b)
	}
	return out
}
