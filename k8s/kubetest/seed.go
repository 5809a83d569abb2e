package kubetest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"iter"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"
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
}

// Seed writes objects straight into etcd, under the keys the API server
// keeps them at and in the form it stores them (JSON with a new uid, the
// creation time, generation 1 for custom resources, and the managed
// fields of the create), much faster than creating them through the API
// (about 1,500 objects a second on two cores). The API server's watch
// cache then receives them from etcd as it would any write. Each object is
// created only if its key is free: Seed fails, having written some objects
// perhaps, if one exists.
//
// Seed is for tests of scale, where a cluster must hold many objects
// before the test starts. It is as exact as the objects it is given:
// build them with the client whose writes they stand for, through a
// Recorder. The API server's admission, validation and defaulting do not
// run: Seed writes objects only of the harness's kinds that have none (see
// the package documentation), custom resources whose schema the objects
// already meet, and the built-in kinds. It returns how many objects it
// wrote.
func (s *Server) Seed(ctx context.Context, objs iter.Seq[Object]) (int, error) {
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{s.etcdURL}, DialTimeout: requestTimeout, Logger: zap.NewNop()})
	if err != nil {
		return 0, fmt.Errorf("kubetest: seeding: %w", err)
	}
	defer c.Close()
	// Batches of seedBatch creates, each a transaction that writes all of
	// them if every key is free, seedWriters at a time.
	const seedBatch, seedWriters = 100, 4
	now := time.Now().UTC().Truncate(time.Second)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(seedWriters)
	var mu sync.Mutex
	var written int
	batch := make([]clientv3.Op, 0, seedBatch)
	cmps := make([]clientv3.Cmp, 0, seedBatch)
	flush := func() {
		ops, cs := batch, cmps
		batch, cmps = make([]clientv3.Op, 0, seedBatch), make([]clientv3.Cmp, 0, seedBatch)
		g.Go(func() error {
			resp, err := c.Txn(gctx).If(cs...).Then(ops...).Commit()
			if err != nil {
				return fmt.Errorf("kubetest: seeding: %w", err)
			}
			if !resp.Succeeded {
				return fmt.Errorf("kubetest: seeding: an object of the batch after %d written exists already", written)
			}
			mu.Lock()
			written += len(ops)
			mu.Unlock()
			return nil
		})
	}
	for o := range objs {
		key, val, err := storedForm(o, now)
		if err != nil {
			_ = g.Wait()
			return written, err
		}
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(key), "=", 0))
		batch = append(batch, clientv3.OpPut(key, string(val)))
		if len(batch) == seedBatch {
			flush()
		}
		if gctx.Err() != nil {
			break
		}
	}
	if len(batch) > 0 {
		flush()
	}
	err = g.Wait()
	return written, err
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
	fields, err := managedFields(obj)
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

// managedFields returns the fieldsV1 of a create of obj: every field it
// sets, as the API server's field manager records them for a schema that
// deduces the type (maps of fields, atomic lists), less the metadata it
// strips.
func managedFields(obj map[string]any) (any, error) {
	tv, err := typed.DeducedParseableType.FromUnstructured(obj)
	if err != nil {
		return nil, err
	}
	set, err := tv.ToFieldSet()
	if err != nil {
		return nil, err
	}
	b, err := set.Difference(stripped).ToJSON()
	if err != nil {
		return nil, err
	}
	var out any
	err = json.Unmarshal(b, &out)
	return out, err
}

// Recorder is a client endpoint that answers creates without a server, and
// keeps what was sent, for Seed: a client made from its Config (a kubestore
// Store, a clientset) writes objects as it would to a cluster, and Take
// returns them. A POST is answered 201 with the object, given
// resourceVersion "1" and a uid; a server-side apply (PATCH
// application/apply-patch+yaml in JSON) likewise. Any other request is
// answered 501, so that a client that reads before it writes is seen to
// need more than a Recorder.
//
// A Recorder is safe for concurrent use by multiple goroutines. The zero
// Recorder is ready to use.
type Recorder struct {
	mu   sync.Mutex
	objs []Object
}

// recorderHost is the host of a Recorder's Config, which is never dialled.
const recorderHost = "kubetest-recorder.invalid"

// Config returns a client config whose requests reach r, with the user
// agent agent (the field manager Seed records).
func (r *Recorder) Config(agent string) *rest.Config {
	return &rest.Config{Host: "https://" + recorderHost, Transport: r, UserAgent: agent, QPS: -1}
}

// Take returns the objects recorded since the last Take, in the order they
// were sent, and forgets them.
func (r *Recorder) Take() []Object {
	r.mu.Lock()
	defer r.mu.Unlock()
	objs := r.objs
	r.objs = nil
	return objs
}

// RoundTrip answers one request; see Recorder.
func (r *Recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	body, err := readBody(req)
	if err != nil {
		return nil, err
	}
	op := ""
	switch {
	case req.Method == http.MethodPost:
		op = "Update"
	case req.Method == http.MethodPatch && strings.HasPrefix(req.Header.Get("Content-Type"), "application/apply-patch"):
		op = "Apply"
	default:
		return recorderStatus(req, http.StatusNotImplemented,
			fmt.Sprintf("kubetest.Recorder answers creates only, not %s %s", req.Method, req.URL.Path)), nil
	}
	gr, ns, err := resourceOf(req.URL.Path)
	if err != nil {
		return recorderStatus(req, http.StatusBadRequest, err.Error()), nil
	}
	var obj map[string]any
	if err := json.Unmarshal(body, &obj); err != nil {
		return recorderStatus(req, http.StatusBadRequest, fmt.Sprintf("kubetest.Recorder: body of %s %s: %v", req.Method, req.URL.Path, err)), nil
	}
	agent := req.Header.Get("User-Agent")
	if i := strings.IndexByte(agent, '/'); i >= 0 {
		agent = agent[:i]
	}
	r.mu.Lock()
	r.objs = append(r.objs, Object{Resource: gr, Namespace: ns, Manager: agent, Operation: op, JSON: body})
	r.mu.Unlock()
	meta, _ := obj["metadata"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
		obj["metadata"] = meta
	}
	meta["resourceVersion"] = "1"
	meta["uid"] = uuid.New().String()
	out, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	status := http.StatusCreated
	if op == "Apply" {
		status = http.StatusOK
	}
	return recorderResponse(req, status, out), nil
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
func resourceOf(path string) (schema.GroupResource, string, error) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	var gr schema.GroupResource
	switch {
	case len(parts) >= 3 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 4 && parts[0] == "apis":
		gr.Group = parts[1]
		parts = parts[3:]
	default:
		return gr, "", fmt.Errorf("kubetest.Recorder: %s is not a resource path", path)
	}
	ns := ""
	if len(parts) >= 3 && parts[0] == "namespaces" {
		ns, parts = parts[1], parts[2:]
	}
	gr.Resource = parts[0]
	return gr, ns, nil
}

func recorderStatus(req *http.Request, code int, msg string) *http.Response {
	b, _ := json.Marshal(&metav1.Status{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"},
		Status:   metav1.StatusFailure, Message: msg, Code: int32(code),
	})
	return recorderResponse(req, code, b)
}

func recorderResponse(req *http.Request, code int, body []byte) *http.Response {
	return &http.Response{
		StatusCode: code, Status: http.StatusText(code), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:  http.Header{"Content-Type": []string{"application/json"}},
		Body:    io.NopCloser(bytes.NewReader(body)),
		Request: req, ContentLength: int64(len(body)),
	}
}
