package kubetest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"iter"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
	"sigs.k8s.io/structured-merge-diff/v6/typed"
)

// Object is an object as a client sends it to be created: the JSON body of
// a POST (or of a server-side apply that creates it), and where it goes.
type Object struct {
	// Resource is the object's group and resource (plural), such as
	// ipam.ipamkit.io/ipclaims.
	Resource schema.GroupResource
	// Namespace is the object's namespace, empty for a cluster-scoped
	// object.
	Namespace string
	// Manager is the field manager the API server would record for the
	// create: the client's user agent up to its first "/".
	Manager string
	// Operation is the managed fields' operation: "Update" for a POST (as
	// the API server records a create), "Apply" for a server-side apply.
	Operation string
	// JSON is the body the client sent.
	JSON []byte
	// IfAbsent makes Seed skip the object if its key exists, rather than
	// fail: for objects every writer makes alike, such as a marker.
	IfAbsent bool
}

// Seed writes objects straight into etcd, under the keys the API server
// keeps them at and in the form it stores them (JSON with a new uid, the
// creation time, generation 1 for custom resources, and the managed
// fields of the create), much faster than creating them through the API.
// Each object is a transaction of its own, so it has a revision of its own
// as after a create, written only if its key is free; they are written
// several at a time, in no particular order. Seed fails, having written
// some objects perhaps, if an object's key exists, unless the object is
// IfAbsent. The API server's watch cache receives them from etcd as it
// would any write; objects seeded while the API server is stopped
// (StopAPI) it loads in one list when started again (StartAPI), which is
// much faster for many.
//
// Seed is for tests of scale, where a cluster must hold many objects
// before the test starts. It is as exact as the objects it is given:
// build them with the client whose writes they stand for, through a
// Recorder. The API server's admission, validation and defaulting do not
// run: seed objects only of the harness's kinds that have none (see the
// package documentation), custom resources whose schema the objects
// already meet, and the built-in kinds. It returns how many objects it
// wrote.
func (s *Server) Seed(ctx context.Context, objs iter.Seq[Object]) (int, error) {
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{s.etcdURL}, DialTimeout: requestTimeout, Logger: zap.NewNop()})
	if err != nil {
		return 0, fmt.Errorf("kubetest: seeding: %w", err)
	}
	defer c.Close()
	// One transaction per object, so that each has a revision of its own
	// as a create through the API would (the watch cache moves on to a
	// revision with its first event: a consistent read could see part of a
	// transaction of several), seedWriters at a time.
	const seedWriters = 16
	now := time.Now().UTC().Truncate(time.Second)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(seedWriters)
	var written atomic.Int64
	for o := range objs {
		key, val, err := storedForm(o, now)
		if err != nil {
			_ = g.Wait()
			return int(written.Load()), err
		}
		g.Go(func() error {
			resp, err := c.Txn(gctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).Then(clientv3.OpPut(key, string(val))).Commit()
			switch {
			case err != nil:
				return fmt.Errorf("kubetest: seeding %s: %w", key, err)
			case resp.Succeeded:
				written.Add(1)
			case !o.IfAbsent:
				return fmt.Errorf("kubetest: seeding: %s exists already", key)
			}
			return nil
		})
		if gctx.Err() != nil {
			break
		}
	}
	err = g.Wait()
	return int(written.Load()), err
}

// Unseed deletes every object of gr straight from etcd, or with an empty
// gr.Resource every object of the group gr.Group, and returns how many it
// deleted: with the API server stopped (StopAPI), for the data of a scale
// test, which a DeleteCollection through the API takes minutes to remove.
// The API server's watch cache, if it runs, follows the deletes one by
// one.
func (s *Server) Unseed(ctx context.Context, gr schema.GroupResource) (int64, error) {
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{s.etcdURL}, DialTimeout: requestTimeout, Logger: zap.NewNop()})
	if err != nil {
		return 0, fmt.Errorf("kubetest: unseeding: %w", err)
	}
	defer c.Close()
	prefix := etcdPrefix + "/" + gr.Group + "/"
	if gr.Group == "" {
		prefix = etcdPrefix + "/"
	}
	if gr.Resource != "" {
		prefix += gr.Resource + "/"
	} else if gr.Group == "" {
		return 0, fmt.Errorf("kubetest: unseeding: neither a group nor a resource given")
	}
	resp, err := c.Delete(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return 0, fmt.Errorf("kubetest: unseeding %s: %w", prefix, err)
	}
	return resp.Deleted, nil
}

// builtinResources are the kinds of builtin.go, stored as custom resources
// are but without a generation.
var builtinResources = map[schema.GroupResource]bool{}

func init() {
	groups, err := builtinGroups()
	if err != nil {
		panic(err) // static tables
	}
	for _, g := range groups {
		for _, k := range g.kinds {
			builtinResources[schema.GroupResource{Group: g.gv.Group, Resource: k.resource}] = true
		}
	}
}

// storedForm returns the etcd key and value of o created at time now.
func storedForm(o Object, now time.Time) (string, []byte, error) {
	var obj map[string]any
	if err := json.Unmarshal(o.JSON, &obj); err != nil {
		return "", nil, fmt.Errorf("kubetest: seeding %s: %w", o.Resource, err)
	}
	meta, _ := obj["metadata"].(map[string]any)
	name, _ := meta["name"].(string)
	if name == "" {
		return "", nil, fmt.Errorf("kubetest: seeding %s: metadata.name is empty (generateName is not supported)", o.Resource)
	}
	if ns, _ := meta["namespace"].(string); ns != o.Namespace {
		return "", nil, fmt.Errorf("kubetest: seeding %s %s: metadata.namespace %q, want %q", o.Resource, name, ns, o.Namespace)
	}
	delete(meta, "resourceVersion")
	delete(meta, "managedFields")
	fields, err := managedFields(obj, o.Operation == "Apply")
	if err != nil {
		return "", nil, fmt.Errorf("kubetest: seeding %s %s: %w", o.Resource, name, err)
	}
	apiVersion, _ := obj["apiVersion"].(string)
	meta["managedFields"] = []any{map[string]any{
		"apiVersion": apiVersion,
		"fieldsType": "FieldsV1",
		"fieldsV1":   fields,
		"manager":    o.Manager,
		"operation":  o.Operation,
		"time":       now.Format(time.RFC3339),
	}}
	meta["uid"] = uuid.New().String()
	meta["creationTimestamp"] = now.Format(time.RFC3339)
	if !builtinResources[o.Resource] {
		meta["generation"] = int64(1)
	}
	// As the API server's JSON serializer writes it: keys in order, and a
	// newline.
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(obj); err != nil {
		return "", nil, fmt.Errorf("kubetest: seeding %s %s: %w", o.Resource, name, err)
	}
	key := etcdPrefix + "/" + o.Resource.Group + "/" + o.Resource.Resource + "/"
	if o.Resource.Group == "" {
		key = etcdPrefix + "/" + o.Resource.Resource + "/"
	}
	if o.Namespace != "" {
		key += o.Namespace + "/"
	}
	return key + name, buf.Bytes(), nil
}

// stripped are the fields the API server leaves out of managed fields.
var stripped = fieldpath.NewSet(
	fieldpath.MakePathOrDie("apiVersion"),
	fieldpath.MakePathOrDie("kind"),
	fieldpath.MakePathOrDie("metadata"),
	fieldpath.MakePathOrDie("metadata", "name"),
	fieldpath.MakePathOrDie("metadata", "namespace"),
	fieldpath.MakePathOrDie("metadata", "creationTimestamp"),
	fieldpath.MakePathOrDie("metadata", "selfLink"),
	fieldpath.MakePathOrDie("metadata", "uid"),
	fieldpath.MakePathOrDie("metadata", "clusterName"),
	fieldpath.MakePathOrDie("metadata", "generation"),
	fieldpath.MakePathOrDie("metadata", "managedFields"),
	fieldpath.MakePathOrDie("metadata", "resourceVersion"),
)

// managedFields returns the fieldsV1 of a create (or, with apply, a
// server-side apply) of obj: every field it sets, as the API server's field
// manager records them for a schema that deduces the type (maps of fields,
// atomic lists), less the metadata it strips.
func managedFields(obj map[string]any, apply bool) (any, error) {
	var key strings.Builder
	if apply {
		key.WriteString("apply:")
	}
	shape(&key, obj)
	if f, ok := fieldsByShape.Load(key.String()); ok {
		return f, nil
	}
	f, err := fieldsOf(obj, apply)
	if err == nil {
		fieldsByShape.Store(key.String(), f)
	}
	return f, err
}

// fieldsByShape caches managedFields by the shape of the object: objects
// with the same fields have the same managed fields, and working them out
// takes longer than writing the object.
var fieldsByShape sync.Map

// shape writes v's fields, without the values of its scalars.
func shape(b *strings.Builder, v any) {
	switch v := v.(type) {
	case map[string]any:
		b.WriteByte('{')
		for _, k := range slices.Sorted(maps.Keys(v)) {
			b.WriteString(strconv.Quote(k))
			b.WriteByte(':')
			shape(b, v[k])
		}
		b.WriteByte('}')
	case []any:
		b.WriteByte('[')
		for _, x := range v {
			shape(b, x)
			b.WriteByte(',')
		}
		b.WriteByte(']')
	default:
		b.WriteByte('.')
	}
}

// fieldsOf works out managedFields: of an apply, the fields it sets (its
// leaves); of a create, those and the maps that hold them.
func fieldsOf(obj map[string]any, apply bool) (any, error) {
	tv, err := typed.DeducedParseableType.FromUnstructured(obj)
	if err != nil {
		return nil, err
	}
	set, err := tv.ToFieldSet()
	if err != nil {
		return nil, err
	}
	if apply {
		set = set.Leaves()
	}
	b, err := set.Difference(stripped).ToJSON()
	if err != nil {
		return nil, err
	}
	var out any
	err = json.Unmarshal(b, &out)
	return out, err
}

// Recorder is a client endpoint that stands for an empty cluster in
// memory, for Seed: a client made from its Config (a kubestore Store, a
// clientset) writes objects as it would to a cluster, and Take returns
// them as they ended up. It serves creates (POST, 409 if the name is
// taken), reads by name (404 for an object not written), lists (every
// object of the resource written, selectors ignored), updates (PUT, 409 if
// the resourceVersion is not the object's), server-side applies and
// deletes (with a resourceVersion precondition); each write gets the next
// resourceVersion and a uid. A watch, or any other request, is answered
// 501, so that a client that needs more is seen to.
//
// A Recorder is safe for concurrent use by multiple goroutines. The zero
// Recorder is ready to use.
type Recorder struct {
	mu    sync.Mutex
	rev   int64
	objs  map[string]*recorded // by path of the object
	order []string             // paths, in the order first written
}

// recorded is an object a Recorder holds.
type recorded struct {
	obj     Object
	body    map[string]any
	deleted bool
}

// recorderHost is the host of a Recorder's Config, which is never dialled.
const recorderHost = "kubetest-recorder.invalid"

// Config returns a client config whose requests reach r, with the user
// agent agent (the field manager Seed records).
func (r *Recorder) Config(agent string) *rest.Config {
	return &rest.Config{Host: "https://" + recorderHost, Transport: r, UserAgent: agent, QPS: -1}
}

// Take returns the objects r holds, in the order they were first written,
// and forgets them.
func (r *Recorder) Take() []Object {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Object
	for _, p := range r.order {
		if o := r.objs[p]; !o.deleted {
			out = append(out, o.obj)
		}
	}
	r.objs, r.order = nil, nil
	return out
}

// RoundTrip answers one request; see Recorder.
func (r *Recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	body, err := readBody(req)
	if err != nil {
		return nil, err
	}
	gr, ns, name, err := resourceOf(req.URL.Path)
	if err != nil {
		return recorderStatus(req, apierrors.NewBadRequest(err.Error())), nil
	}
	agent := req.Header.Get("User-Agent")
	if i := strings.IndexAny(agent, "/ "); i >= 0 {
		agent = agent[:i]
	}
	if fm := req.URL.Query().Get("fieldManager"); fm != "" {
		agent = fm
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.objs == nil {
		r.objs = map[string]*recorded{}
	}
	collection := strings.TrimSuffix(req.URL.Path, "/"+name)
	switch {
	case req.Method == http.MethodGet && req.URL.Query().Get("watch") == "true":
	case req.Method == http.MethodGet && name == "":
		items := []any{}
		for _, p := range r.order {
			if o := r.objs[p]; !o.deleted && o.obj.Resource == gr && (ns == "" || o.obj.Namespace == ns) {
				items = append(items, o.body)
			}
		}
		return recorderJSON(req, http.StatusOK, map[string]any{"apiVersion": "v1", "kind": "List",
			"metadata": map[string]any{"resourceVersion": strconv.FormatInt(r.rev, 10)}, "items": items})
	case req.Method == http.MethodGet:
		if o := r.objs[req.URL.Path]; o != nil && !o.deleted {
			return recorderJSON(req, http.StatusOK, o.body)
		}
		return recorderStatus(req, apierrors.NewNotFound(gr, name)), nil
	case req.Method == http.MethodPost && name == "",
		req.Method == http.MethodPut && name != "",
		req.Method == http.MethodPatch && name != "" && strings.HasPrefix(req.Header.Get("Content-Type"), "application/apply-patch"):
		var obj map[string]any
		if err := json.Unmarshal(body, &obj); err != nil {
			return recorderStatus(req, apierrors.NewBadRequest(fmt.Sprintf("body of %s %s: %v", req.Method, req.URL.Path, err))), nil
		}
		meta, _ := obj["metadata"].(map[string]any)
		if meta == nil {
			meta = map[string]any{}
			obj["metadata"] = meta
		}
		if name == "" {
			name, _ = meta["name"].(string)
		}
		path := collection + "/" + name
		cur := r.objs[path]
		exists := cur != nil && !cur.deleted
		code := http.StatusOK
		op := "Update"
		switch req.Method {
		case http.MethodPost:
			if exists {
				return recorderStatus(req, apierrors.NewAlreadyExists(gr, name)), nil
			}
			code = http.StatusCreated
		case http.MethodPut:
			if !exists {
				return recorderStatus(req, apierrors.NewNotFound(gr, name)), nil
			}
			if rv, _ := meta["resourceVersion"].(string); rv != "" && rv != cur.body["metadata"].(map[string]any)["resourceVersion"] {
				return recorderStatus(req, apierrors.NewConflict(gr, name, fmt.Errorf("the object has been modified"))), nil
			}
		default:
			op = "Apply"
			if !exists {
				code = http.StatusCreated
			}
		}
		r.rev++
		meta["name"] = name
		meta["resourceVersion"] = strconv.FormatInt(r.rev, 10)
		if exists {
			meta["uid"] = cur.body["metadata"].(map[string]any)["uid"]
		} else {
			meta["uid"] = uuid.New().String()
		}
		out, err := json.Marshal(obj)
		if err != nil {
			return nil, err
		}
		if cur == nil {
			r.order = append(r.order, path)
		}
		r.objs[path] = &recorded{obj: Object{Resource: gr, Namespace: ns, Manager: agent, Operation: op, JSON: out}, body: obj}
		return recorderResponse(req, code, out), nil
	case req.Method == http.MethodDelete && name != "":
		cur := r.objs[req.URL.Path]
		if cur == nil || cur.deleted {
			return recorderStatus(req, apierrors.NewNotFound(gr, name)), nil
		}
		var opts metav1.DeleteOptions
		if len(body) > 0 {
			if err := json.Unmarshal(body, &opts); err != nil {
				return recorderStatus(req, apierrors.NewBadRequest(err.Error())), nil
			}
		}
		curMeta := cur.body["metadata"].(map[string]any)
		if pre := opts.Preconditions; pre != nil && (pre.ResourceVersion != nil && *pre.ResourceVersion != curMeta["resourceVersion"] ||
			pre.UID != nil && string(*pre.UID) != curMeta["uid"]) {
			return recorderStatus(req, apierrors.NewConflict(gr, name, fmt.Errorf("precondition failed"))), nil
		}
		cur.deleted = true
		return recorderJSON(req, http.StatusOK, cur.body)
	}
	return recorderStatus(req, apierrors.NewMethodNotSupported(gr, req.Method+" (kubetest.Recorder)")), nil
}

func readBody(req *http.Request) ([]byte, error) {
	if req.Body == nil {
		return nil, nil
	}
	defer req.Body.Close()
	return io.ReadAll(req.Body)
}

// resourceOf parses a resource path: /api/v1/[namespaces/NS/]RESOURCE[/NAME]
// or /apis/GROUP/VERSION/[namespaces/NS/]RESOURCE[/NAME].
func resourceOf(path string) (gr schema.GroupResource, ns, name string, err error) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(parts) >= 3 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 4 && parts[0] == "apis":
		gr.Group = parts[1]
		parts = parts[3:]
	default:
		return gr, "", "", fmt.Errorf("kubetest.Recorder: %s is not a resource path", path)
	}
	if len(parts) >= 3 && parts[0] == "namespaces" {
		ns, parts = parts[1], parts[2:]
	}
	gr.Resource = parts[0]
	switch len(parts) {
	case 1:
	case 2:
		name = parts[1]
	default:
		return gr, "", "", fmt.Errorf("kubetest.Recorder: %s: subresources are not served", path)
	}
	return gr, ns, name, nil
}

func recorderStatus(req *http.Request, err *apierrors.StatusError) *http.Response {
	st := err.ErrStatus
	st.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Status"}
	b, _ := json.Marshal(&st)
	return recorderResponse(req, int(st.Code), b)
}

func recorderJSON(req *http.Request, code int, v any) (*http.Response, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return recorderResponse(req, code, b), nil
}

func recorderResponse(req *http.Request, code int, body []byte) *http.Response {
	return &http.Response{
		StatusCode: code, Status: http.StatusText(code), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:  http.Header{"Content-Type": []string{"application/json"}},
		Body:    io.NopCloser(bytes.NewReader(body)),
		Request: req, ContentLength: int64(len(body)),
	}
}
