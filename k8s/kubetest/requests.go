package kubetest

import (
	"errors"
	"net/http"
	"strings"
	"sync"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"
)

// Request is one kind of request the API server served, as an RBAC
// authorizer sees it (a resource request's attributes), with who sent it.
// Requests lists each distinct Request once.
type Request struct {
	// UserAgent is the client's User-Agent header: programs name
	// themselves there ("cni-ipam", "ipam-controller/<version>").
	UserAgent string
	// User is the authenticated user's name: with Options.Tokens, the
	// name the token maps to, or "system:anonymous" for a request without
	// one; empty when authentication is off.
	User string
	// Verb is RBAC's verb: get, list, watch, create, update, patch,
	// delete, deletecollection.
	Verb string
	// APIGroup, Resource and Subresource name what was asked for ("" is
	// the core group; Subresource is empty for the resource itself).
	APIGroup, Resource, Subresource string
	// Namespace is the request's namespace, empty for a cluster-scoped
	// resource or a request across all namespaces.
	Namespace string
	// Name is the object's name, empty for a list, a watch of a
	// collection or a create.
	Name string
}

// requestLog keeps the distinct resource requests the API server served.
// It outlives StopAPI and StartAPI.
type requestLog struct {
	mu    sync.Mutex
	seen  map[Request]bool
	order []Request
}

func (l *requestLog) add(r Request) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen[r] {
		return
	}
	if l.seen == nil {
		l.seen = map[Request]bool{}
	}
	l.seen[r] = true
	l.order = append(l.order, r)
}

// Requests returns every distinct resource request the API server has
// served since Start (across StopAPI and StartAPI), in the order first
// seen: what a test compares with the RBAC rules of the program that made
// them. Requests outside the API (/healthz, /version, discovery) are not
// listed.
func (s *Server) Requests() []Request {
	s.log.mu.Lock()
	defer s.log.mu.Unlock()
	return append([]Request(nil), s.log.order...)
}

// recording wraps the API server's handler, inside the filters that resolve
// the request's attributes and user, to log each resource request.
func (s *Server) recording(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if info, ok := request.RequestInfoFrom(r.Context()); ok && info.IsResourceRequest {
			rq := Request{UserAgent: r.UserAgent(), Verb: info.Verb, APIGroup: info.APIGroup, Resource: info.Resource,
				Subresource: info.Subresource, Namespace: info.Namespace, Name: info.Name}
			if u, ok := request.UserFrom(r.Context()); ok {
				rq.User = u.GetName()
			}
			s.log.add(rq)
		}
		h.ServeHTTP(w, r)
	})
}

// tokenAuthenticator authenticates bearer tokens with check; a request
// without an Authorization header is anonymous (and allowed: the server
// authorizes every request), the API server's own loopback token is the
// API server's user.
func tokenAuthenticator(check func(token string) (string, bool), loopbackToken string) authenticator.Request {
	return authenticator.RequestFunc(func(r *http.Request) (*authenticator.Response, bool, error) {
		h := r.Header.Get("Authorization")
		if h == "" {
			return &authenticator.Response{User: &user.DefaultInfo{Name: user.Anonymous, Groups: []string{user.AllUnauthenticated}}}, true, nil
		}
		token, ok := strings.CutPrefix(h, "Bearer ")
		if !ok {
			return nil, false, errors.New("kubetest: only bearer tokens are accepted")
		}
		if loopbackToken != "" && token == loopbackToken {
			return &authenticator.Response{User: &user.DefaultInfo{Name: user.APIServerUser,
				Groups: []string{user.AllAuthenticated, user.SystemPrivilegedGroup}}}, true, nil
		}
		name, ok := check(token)
		if !ok {
			return nil, false, errors.New("kubetest: the token is unknown or expired")
		}
		return &authenticator.Response{User: &user.DefaultInfo{Name: name, Groups: []string{user.AllAuthenticated}}}, true, nil
	})
}
