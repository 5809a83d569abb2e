package deploy_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ipamkit/ipam/k8s/kubetest"
)

// shortTokens are service-account tokens that expire, as the API server
// checks projected tokens: each is good until its expiry, then refused.
type shortTokens struct {
	mu      sync.Mutex
	expires map[string]time.Time
}

// issue returns a new token of the plugin's service account, good for
// lifetime.
func (s *shortTokens) issue(name string, lifetime time.Duration) (string, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	exp := time.Now().Add(lifetime)
	s.expires[name] = exp
	return name, exp
}

func (s *shortTokens) check(token string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	exp, ok := s.expires[token]
	if !ok || !time.Now().Before(exp) {
		return "", false
	}
	return "system:serviceaccount:ipam-system:cni-ipam", true
}

// TestKubeconfigRefresh runs install.sh, the DaemonSet's kubeconfig writer,
// against the in-process API server with short-lived tokens: the server
// refuses a token after its expiry (401). The kubelet's part is played by
// the test: it rotates the projected token file before the token expires
// (at half its lifetime; the kubelet does at 80 %). The kubeconfig holds the
// new token before the old one expires, a request made with the refreshed
// kubeconfig succeeds after that expiry, and one made with the kubeconfig as
// it was before the rotation is refused.
func TestKubeconfigRefresh(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skipf("no sh on PATH: %v", err)
	}
	// The token's lifetime leaves the writer, which checks every second,
	// ten seconds after the rotation: room for a loaded machine.
	const lifetime = 20 * time.Second
	tokens := &shortTokens{expires: map[string]time.Time{}}
	srv := startServer(t, kubetest.Options{Tokens: tokens.check})
	host, port, ok := strings.Cut(srv.Addr(), ":")
	if !ok {
		t.Fatalf("server address %q", srv.Addr())
	}

	n := newNode(t, srv.Config().CAData)
	first, firstExp := tokens.issue("token-1", lifetime)
	n.writeToken(t, first)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := exec.CommandContext(ctx, sh, "install.sh")
	var stderr lockedBuffer // written by exec's copying goroutine
	cmd.Stderr = &stderr
	cmd.Env = n.env("KUBERNETES_SERVICE_HOST="+host, "KUBERNETES_SERVICE_PORT="+port, "REFRESH_SECONDS=1")
	must(t, cmd.Start())
	defer func() { cancel(); _ = cmd.Wait() }()

	kubeconfig := filepath.Join(n.conf, "cni-ipam.kubeconfig")
	// waitToken waits until the kubeconfig holds token, and returns the
	// file's contents then.
	waitToken := func(token string) []byte {
		t.Helper()
		deadline := time.Now().Add(2 * time.Minute) // a bound for a hang
		for {
			b, err := os.ReadFile(kubeconfig)
			if err == nil {
				if cfg, err := clientcmd.Load(b); err == nil && cfg.AuthInfos["cni-ipam"] != nil && cfg.AuthInfos["cni-ipam"].Token == token {
					return b
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("the kubeconfig never held %s; install.sh said:\n%s", token, stderr.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// list lists namespaces as a program given the kubeconfig kc would.
	list := func(kc []byte) error {
		cfg, err := clientcmd.RESTConfigFromKubeConfig(kc)
		if err != nil {
			t.Fatal(err)
		}
		_, err = kubernetes.NewForConfigOrDie(cfg).CoreV1().Namespaces().List(t.Context(), metav1.ListOptions{})
		return err
	}

	before := waitToken(first)
	if err := list(before); err != nil {
		t.Fatalf("a request with the first kubeconfig: %v", err)
	}

	// The kubelet rotates the token before it expires.
	time.Sleep(time.Until(firstExp.Add(-lifetime / 2)))
	second, _ := tokens.issue("token-2", lifetime)
	n.writeToken(t, second)
	after := waitToken(second)
	if refreshed := time.Now(); !refreshed.Before(firstExp) {
		t.Fatalf("the kubeconfig was refreshed %s after the old token expired", refreshed.Sub(firstExp))
	} else {
		t.Logf("the kubeconfig was refreshed %s before the old token expired", firstExp.Sub(refreshed).Round(time.Millisecond))
	}

	// Past the first token's expiry: the refreshed kubeconfig works, the
	// old one is refused.
	time.Sleep(time.Until(firstExp) + 100*time.Millisecond)
	if err := list(after); err != nil {
		t.Errorf("a request with the refreshed kubeconfig after the old token expired: %v", err)
	}
	if err := list(before); !apierrors.IsUnauthorized(err) {
		t.Errorf("a request with the kubeconfig of the expired token: %v, want 401 Unauthorized (else this test shows nothing)", err)
	}
	if n := strings.Count(stderr.String(), "wrote "); n != 2 {
		t.Errorf("install.sh wrote the kubeconfig %s times, want 2 (once per token):\n%s", strconv.Itoa(n), stderr.String())
	}
}
