package kubetest

import (
	"net/http"
	"strings"
	"sync"

	"k8s.io/apiserver/pkg/endpoints/request"
)

// RequestKind is a kind of request the API server answered, as
// RequestCounts counts them.
type RequestKind struct {
	// Agent is the client's user agent up to its first "/" or space
	// ("cni-ipam", "kubetest"), which is how the API server names a field
	// manager.
	Agent string
	// Verb is the request's verb: get, list, watch, create, update,
	// patch, delete, deletecollection.
	Verb string
	// Resource is the resource, such as "ipclaims" or "pods", with its
	// subresource after a "/".
	Resource string
}

// RequestCounts returns how many requests for resources the API server has
// served since Start, across restarts, by kind: every request of every
// client, in this process or another (a CNI plugin exec'd by a test), and
// the API server's own (its agent starts with "apiextensions-apiserver" or
// is empty). A watch counts once, when it starts. Tests take the
// difference of two calls (Requests lists the distinct requests instead).
func (s *Server) RequestCounts() map[RequestKind]int64 { return s.requests.snapshot() }

// requestCounts counts the requests of a server.
type requestCounts struct {
	mu sync.Mutex
	n  map[RequestKind]int64
}

// count wraps the API server's handler, behind the filters that find what
// a request is for.
func (c *requestCounts) count(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if info, ok := request.RequestInfoFrom(r.Context()); ok && info.IsResourceRequest {
			agent := r.UserAgent()
			if i := strings.IndexAny(agent, "/ "); i >= 0 {
				agent = agent[:i]
			}
			res := info.Resource
			if info.Subresource != "" {
				res += "/" + info.Subresource
			}
			k := RequestKind{Agent: agent, Verb: info.Verb, Resource: res}
			c.mu.Lock()
			if c.n == nil {
				c.n = map[RequestKind]int64{}
			}
			c.n[k]++
			c.mu.Unlock()
		}
		h.ServeHTTP(w, r)
	})
}

func (c *requestCounts) snapshot() map[RequestKind]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[RequestKind]int64, len(c.n))
	for k, v := range c.n {
		out[k] = v
	}
	return out
}
