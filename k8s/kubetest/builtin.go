package kubetest

import (
	"context"
	"fmt"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/names"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	openapicommon "k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// builtinKind is one built-in resource the harness serves through the generic
// registry, as kube-apiserver would, but without its defaulting, validation
// and status subresource.
type builtinKind struct {
	resource   string
	singular   string
	namespaced bool
	newObj     func() runtime.Object
	newList    func() runtime.Object
	// attrs gives the fields a field selector may use, and fieldLabels
	// names those beyond metadata.name and metadata.namespace; nil gives
	// just those two.
	attrs       storage.AttrFunc
	fieldLabels []string
	// model and listModel are the OpenAPI model names of the kind and its
	// list, for the stub definitions the server needs.
	model, listModel string
}

// builtinGroup is one API group of built-in kinds.
type builtinGroup struct {
	gv     schema.GroupVersion
	scheme *runtime.Scheme
	codecs serializer.CodecFactory
	kinds  []builtinKind
}

// builtinGroups returns the groups the harness serves: pods, nodes,
// namespaces, service accounts, ConfigMaps and Services in the core group,
// StatefulSets, Deployments, ReplicaSets and DaemonSets in apps/v1, Jobs
// and CronJobs in batch/v1 (every kind the SpiderSubnet runner follows),
// Leases in coordination.k8s.io/v1 (leader election), Events in
// events.k8s.io/v1, PodDisruptionBudgets in policy/v1 and the four RBAC
// kinds in rbac.authorization.k8s.io/v1 (what install manifests create).
func builtinGroups() ([]*builtinGroup, error) {
	pods := kind[corev1.Pod, corev1.PodList]("pods", "pod", namespaced)
	pods.attrs, pods.fieldLabels = podAttrs, []string{"spec.nodeName", "status.phase"}
	specs := []struct {
		gv          schema.GroupVersion
		addToScheme func(*runtime.Scheme) error
		kinds       []builtinKind
	}{
		{corev1.SchemeGroupVersion, corev1.AddToScheme, []builtinKind{
			pods,
			kind[corev1.Node, corev1.NodeList]("nodes", "node", clusterScoped),
			kind[corev1.Namespace, corev1.NamespaceList]("namespaces", "namespace", clusterScoped),
			// What install manifests hold beside workloads.
			kind[corev1.ServiceAccount, corev1.ServiceAccountList]("serviceaccounts", "serviceaccount", namespaced),
			kind[corev1.ConfigMap, corev1.ConfigMapList]("configmaps", "configmap", namespaced),
			kind[corev1.Service, corev1.ServiceList]("services", "service", namespaced),
		}},
		{appsv1.SchemeGroupVersion, appsv1.AddToScheme, []builtinKind{
			kind[appsv1.StatefulSet, appsv1.StatefulSetList]("statefulsets", "statefulset", namespaced),
			kind[appsv1.Deployment, appsv1.DeploymentList]("deployments", "deployment", namespaced),
			kind[appsv1.ReplicaSet, appsv1.ReplicaSetList]("replicasets", "replicaset", namespaced),
			kind[appsv1.DaemonSet, appsv1.DaemonSetList]("daemonsets", "daemonset", namespaced),
		}},
		{batchv1.SchemeGroupVersion, batchv1.AddToScheme, []builtinKind{
			kind[batchv1.Job, batchv1.JobList]("jobs", "job", namespaced),
			kind[batchv1.CronJob, batchv1.CronJobList]("cronjobs", "cronjob", namespaced),
		}},
		{coordinationv1.SchemeGroupVersion, coordinationv1.AddToScheme, []builtinKind{
			kind[coordinationv1.Lease, coordinationv1.LeaseList]("leases", "lease", namespaced),
		}},
		{eventsv1.SchemeGroupVersion, eventsv1.AddToScheme, []builtinKind{
			kind[eventsv1.Event, eventsv1.EventList]("events", "event", namespaced),
		}},
		{policyv1.SchemeGroupVersion, policyv1.AddToScheme, []builtinKind{
			kind[policyv1.PodDisruptionBudget, policyv1.PodDisruptionBudgetList]("poddisruptionbudgets", "poddisruptionbudget", namespaced),
		}},
		{rbacv1.SchemeGroupVersion, rbacv1.AddToScheme, []builtinKind{
			kind[rbacv1.ClusterRole, rbacv1.ClusterRoleList]("clusterroles", "clusterrole", clusterScoped),
			kind[rbacv1.ClusterRoleBinding, rbacv1.ClusterRoleBindingList]("clusterrolebindings", "clusterrolebinding", clusterScoped),
			kind[rbacv1.Role, rbacv1.RoleList]("roles", "role", namespaced),
			kind[rbacv1.RoleBinding, rbacv1.RoleBindingList]("rolebindings", "rolebinding", namespaced),
		}},
	}
	groups := make([]*builtinGroup, 0, len(specs))
	for _, sp := range specs {
		g, err := newBuiltinGroup(sp.gv, sp.addToScheme, sp.kinds)
		if err != nil {
			return nil, err
		}
		groups = append(groups, g)
	}
	return groups, nil
}

// Scopes of kind.
const (
	namespaced    = true
	clusterScoped = false
)

// object is a pointer to a built-in type T that is a runtime.Object.
type object[T any] interface {
	*T
	runtime.Object
}

// modelNamed is a built-in type that knows its OpenAPI model's name.
type modelNamed interface{ OpenAPIModelName() string }

// kind describes the built-in resource of objects of type T, listed as L.
func kind[T, L modelNamed, PT object[T], PL object[L]](resource, singular string, isNamespaced bool) builtinKind {
	var obj T
	var list L
	return builtinKind{
		resource: resource, singular: singular, namespaced: isNamespaced,
		newObj:  func() runtime.Object { return PT(new(T)) },
		newList: func() runtime.Object { return PL(new(L)) },
		model:   obj.OpenAPIModelName(), listModel: list.OpenAPIModelName(),
	}
}

// newBuiltinGroup makes a scheme that holds the group's versioned types, the
// same Go types again as its internal version (so no conversion is needed),
// and the meta types every API group serves.
func newBuiltinGroup(gv schema.GroupVersion, addToScheme func(*runtime.Scheme) error, kinds []builtinKind) (*builtinGroup, error) {
	s := runtime.NewScheme()
	if err := addToScheme(s); err != nil {
		return nil, err
	}
	internal := schema.GroupVersion{Group: gv.Group, Version: runtime.APIVersionInternal}
	for _, k := range kinds {
		for _, obj := range []runtime.Object{k.newObj(), k.newList()} {
			gvks, _, err := s.ObjectKinds(obj)
			if err != nil {
				return nil, err
			}
			s.AddKnownTypeWithName(internal.WithKind(gvks[0].Kind), obj)
		}
		if k.fieldLabels != nil {
			gvks, _, err := s.ObjectKinds(k.newObj())
			if err != nil {
				return nil, err
			}
			known := append([]string{"metadata.name", "metadata.namespace"}, k.fieldLabels...)
			err = s.AddFieldLabelConversionFunc(gvks[0], func(label, value string) (string, string, error) {
				if !slices.Contains(known, label) {
					return "", "", fmt.Errorf("field label not supported: %s", label)
				}
				return label, value, nil
			})
			if err != nil {
				return nil, err
			}
		}
	}
	metav1.AddToGroupVersion(s, gv)
	unversioned := schema.GroupVersion{Version: "v1"}
	if gv != unversioned {
		// The request options (ListOptions, ...) every group decodes.
		metav1.AddToGroupVersion(s, unversioned)
	}
	s.AddUnversionedTypes(unversioned, &metav1.Status{}, &metav1.APIVersions{}, &metav1.APIGroupList{},
		&metav1.APIGroup{}, &metav1.APIResourceList{})
	return &builtinGroup{gv: gv, scheme: s, codecs: serializer.NewCodecFactory(s), kinds: kinds}, nil
}

// install serves g's kinds on srv, storing them under prefix in the etcd at
// etcdURL. It returns the functions that release the stores' etcd clients and
// watch caches.
func (g *builtinGroup) install(srv *genericapiserver.GenericAPIServer, etcdURL, prefix string) ([]func(), error) {
	info := genericapiserver.NewDefaultAPIGroupInfo(g.gv.Group, g.scheme, runtime.NewParameterCodec(g.scheme), g.codecs)
	stores := map[string]rest.Storage{}
	var destroy []func()
	for _, k := range g.kinds {
		st, err := g.registryStore(k, etcdURL, prefix)
		if err != nil {
			for _, d := range destroy {
				d()
			}
			return nil, fmt.Errorf("kubetest: storage for %s: %w", k.resource, err)
		}
		stores[k.resource] = st
		destroy = append(destroy, st.Destroy)
	}
	info.VersionedResourcesStorageMap[g.gv.Version] = stores
	var err error
	if g.gv.Group == "" {
		err = srv.InstallLegacyAPIGroup(genericapiserver.DefaultLegacyAPIPrefix, &info)
	} else {
		err = srv.InstallAPIGroup(&info)
	}
	if err != nil {
		for _, d := range destroy {
			d()
		}
		return nil, fmt.Errorf("kubetest: installing API group %q: %w", g.gv.Group, err)
	}
	return destroy, nil
}

func (g *builtinGroup) registryStore(k builtinKind, etcdURL, prefix string) (*genericregistry.Store, error) {
	gr := schema.GroupResource{Group: g.gv.Group, Resource: k.resource}
	strategy := noopStrategy{ObjectTyper: g.scheme, namespaced: k.namespaced}
	st := &genericregistry.Store{
		NewFunc:                   k.newObj,
		NewListFunc:               k.newList,
		DefaultQualifiedResource:  gr,
		SingularQualifiedResource: schema.GroupResource{Group: g.gv.Group, Resource: k.singular},
		CreateStrategy:            strategy,
		UpdateStrategy:            strategy,
		DeleteStrategy:            strategy,
		TableConvertor:            rest.NewDefaultTableConvertor(gr),
	}
	cfg := storagebackend.NewDefaultConfig(prefix, g.codecs.LegacyCodec(g.gv))
	cfg.Transport.ServerList = []string{etcdURL}
	opts := &generic.StoreOptions{
		RESTOptions: restOptionsGetter{generic.RESTOptions{
			StorageConfig:  cfg.ForResource(gr),
			Decorator:      genericregistry.StorageWithCacher(),
			ResourcePrefix: gr.Group + "/" + gr.Resource,
		}},
		AttrFunc: k.attrs,
	}
	if err := st.CompleteWithOptions(opts); err != nil {
		return nil, err
	}
	return st, nil
}

// restOptionsGetter hands out the one RESTOptions it holds.
type restOptionsGetter struct{ opts generic.RESTOptions }

func (g restOptionsGetter) GetRESTOptions(schema.GroupResource, runtime.Object) (generic.RESTOptions, error) {
	return g.opts, nil
}

// podAttrs lets pods be selected by the fields kube-apiserver offers for them
// that controllers use: spec.nodeName and status.phase, besides name and
// namespace.
func podAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, nil, fmt.Errorf("not a pod: %T", obj)
	}
	return labels.Set(pod.Labels), fields.Set{
		"metadata.name":      pod.Name,
		"metadata.namespace": pod.Namespace,
		"spec.nodeName":      pod.Spec.NodeName,
		"status.phase":       string(pod.Status.Phase),
	}, nil
}

// noopStrategy stores objects as they come: no defaulting, no validation, no
// status subresource, immediate deletion.
type noopStrategy struct {
	runtime.ObjectTyper
	namespaced bool
}

var _ interface {
	rest.RESTCreateStrategy
	rest.RESTUpdateStrategy
	rest.RESTDeleteStrategy
} = noopStrategy{}

func (s noopStrategy) GenerateName(base string) string {
	return names.SimpleNameGenerator.GenerateName(base)
}
func (s noopStrategy) NamespaceScoped() bool                          { return s.namespaced }
func (noopStrategy) PrepareForCreate(context.Context, runtime.Object) {}
func (noopStrategy) Validate(context.Context, runtime.Object) field.ErrorList {
	return nil
}
func (noopStrategy) WarningsOnCreate(context.Context, runtime.Object) []string { return nil }
func (noopStrategy) Canonicalize(runtime.Object)                               {}
func (noopStrategy) AllowCreateOnUpdate(context.Context) bool                  { return false }
func (noopStrategy) PrepareForUpdate(context.Context, runtime.Object, runtime.Object) {
}
func (noopStrategy) ValidateUpdate(context.Context, runtime.Object, runtime.Object) field.ErrorList {
	return nil
}
func (noopStrategy) WarningsOnUpdate(context.Context, runtime.Object, runtime.Object) []string {
	return nil
}
func (noopStrategy) AllowUnconditionalUpdate(context.Context) bool { return true }

// stubOpenAPI makes cfg define the built-in kinds as free-form objects: the
// server needs a model for every kind it serves, and the real ones are
// generated into k8s.io/kubernetes, which the harness does not build.
func stubOpenAPI(cfg *openapicommon.OpenAPIV3Config, groups []*builtinGroup) {
	get := cfg.GetDefinitions
	cfg.GetDefinitions = func(ref openapicommon.ReferenceCallback) map[string]openapicommon.OpenAPIDefinition {
		defs := get(ref)
		for _, g := range groups {
			for _, k := range g.kinds {
				for _, name := range []string{k.model, k.listModel} {
					defs[name] = openapicommon.OpenAPIDefinition{Schema: spec.Schema{
						SchemaProps: spec.SchemaProps{Type: []string{"object"}},
						VendorExtensible: spec.VendorExtensible{Extensions: spec.Extensions{
							"x-kubernetes-preserve-unknown-fields": true,
						}},
					}}
				}
			}
		}
		return defs
	}
	if cfg.Definitions != nil {
		// Definitions, when set, wins over GetDefinitions: make it again.
		cfg.Definitions = cfg.GetDefinitions(func(name string) spec.Ref {
			defName, _ := cfg.GetDefinitionName(name)
			return spec.MustCreateRef("#/components/schemas/" + openapicommon.EscapeJsonPointer(defName))
		})
	}
}
