package kubesubnet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// AnnotationLock is a leader-election lock (a resourcelock.Interface of
// client-go's leaderelection) kept in an annotation of an object that
// exists, such as a Namespace: the record is read with the object and
// written with an Update that carries the resourceVersion it was read at, so
// of two candidates that read one record, one writes and the other gets a
// conflict. It is for clusters, and test servers, without
// coordination.k8s.io Leases; where Leases are served, client-go's
// resourcelock.LeaseLock is the usual choice.
//
// The zero AnnotationLock is not usable: fill every field. An
// AnnotationLock is used by one LeaderElector at a time.
type AnnotationLock struct {
	Client dynamic.Interface
	// Resource, Namespace and Name name the object; Namespace is empty for
	// a cluster-scoped one.
	Resource  schema.GroupVersionResource
	Namespace string
	Name      string
	// Key is the annotation that holds the record.
	Key string
	// ID identifies this candidate.
	ID string

	obj *unstructured.Unstructured // as last read or written
}

var _ resourcelock.Interface = (*AnnotationLock)(nil)

func (l *AnnotationLock) client() dynamic.ResourceInterface {
	if l.Namespace == "" {
		return l.Client.Resource(l.Resource)
	}
	return l.Client.Resource(l.Resource).Namespace(l.Namespace)
}

// Get reads the record. An object without the annotation has an empty
// record (no holder), which Update may take.
func (l *AnnotationLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	obj, err := l.client().Get(ctx, l.Name, metav1.GetOptions{})
	if err != nil {
		return nil, nil, err
	}
	l.obj = obj
	raw := []byte(obj.GetAnnotations()[l.Key])
	var rec resourcelock.LeaderElectionRecord
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &rec); err != nil {
			return nil, nil, fmt.Errorf("%s: annotation %s %q: %w", l.Describe(), l.Key, raw, err)
		}
	}
	return &rec, raw, nil
}

// Create writes the first record. The object must exist: Create writes the
// annotation the way Update does.
func (l *AnnotationLock) Create(ctx context.Context, rec resourcelock.LeaderElectionRecord) error {
	if l.obj == nil {
		if _, _, err := l.Get(ctx); err != nil {
			return err
		}
	}
	return l.Update(ctx, rec)
}

// Update writes the record, at the resourceVersion the object was last read
// or written at: a conflict if another candidate wrote since.
func (l *AnnotationLock) Update(ctx context.Context, rec resourcelock.LeaderElectionRecord) error {
	if l.obj == nil {
		return errors.New("annotation lock: not initialized (Get first)")
	}
	raw, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	obj := l.obj.DeepCopy()
	ann := obj.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	ann[l.Key] = string(raw)
	obj.SetAnnotations(ann)
	out, err := l.client().Update(ctx, obj, metav1.UpdateOptions{})
	if err != nil {
		if apierrors.IsConflict(err) {
			l.obj = nil // read it again before the next try
		}
		return err
	}
	l.obj = out
	return nil
}

// RecordEvent does nothing: the record is the only trace.
func (l *AnnotationLock) RecordEvent(string) {}

// Identity returns ID.
func (l *AnnotationLock) Identity() string { return l.ID }

// Describe names the object and the annotation.
func (l *AnnotationLock) Describe() string {
	if l.Namespace == "" {
		return fmt.Sprintf("%s %s, annotation %s", l.Resource.Resource, l.Name, l.Key)
	}
	return fmt.Sprintf("%s %s/%s, annotation %s", l.Resource.Resource, l.Namespace, l.Name, l.Key)
}
