// Package kubeconfig checks a kubeconfig file before client-go reads it:
// client-go reads the file, and the files it names, whole, so that a
// kubeconfig of /dev/zero (or one naming /dev/zero as a certificate) runs a
// program out of memory.
package kubeconfig

import (
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/ipamkit/ipam/cmd/internal/limited"
)

// Check reads the kubeconfig file at path, and the files its current
// context names (its cluster's certificate-authority, its user's
// client-certificate, client-key and tokenFile), each up to
// limited.MaxFile, and reports the
// first that cannot be read or is larger, naming it: `"/dev/zero": larger
// than the limit of 4 MiB`, or `"/etc/kubeconfig": users["admin"].client-key
// "/dev/zero": ...`. The caller names the field that gave path.
func Check(path string) error {
	data, err := limited.ReadFile(path, limited.MaxFile)
	if err != nil {
		return fmt.Errorf("%q: %w", path, err)
	}
	cfg, err := clientcmd.Load(data)
	if err != nil {
		return fmt.Errorf("%q: %w", path, err)
	}
	if err := CheckContext(cfg, cfg.CurrentContext, filepath.Dir(path)); err != nil {
		return fmt.Errorf("%q: %w", path, err)
	}
	return nil
}

// CheckContext reads the files that context names in cfg (its cluster's
// certificate-authority, its user's client-certificate, client-key and
// tokenFile), each up to limited.MaxFile, and reports the first that
// cannot be read or is larger: `users["admin"]: file "/dev/zero": larger
// than the limit of 4 MiB`. A relative name is read from dir. A context cfg
// does not have is not an error here: client-go says what is missing.
func CheckContext(cfg *clientcmdapi.Config, context, dir string) error {
	check := func(what, name string, refs []*string) error {
		for _, ref := range refs {
			file := *ref
			if file == "" {
				continue
			}
			if !filepath.IsAbs(file) {
				file = filepath.Join(dir, file)
			}
			if _, err := limited.ReadFile(file, limited.MaxFile); err != nil {
				return fmt.Errorf("%s[%q]: file %q: %w", what, name, file, err)
			}
		}
		return nil
	}
	kctx := cfg.Contexts[context]
	if kctx == nil {
		return nil
	}
	if c := cfg.Clusters[kctx.Cluster]; c != nil {
		if err := check("clusters", kctx.Cluster, clientcmd.GetClusterFileReferences(c)); err != nil {
			return err
		}
	}
	if u := cfg.AuthInfos[kctx.AuthInfo]; u != nil {
		if err := check("users", kctx.AuthInfo, clientcmd.GetAuthInfoFileReferences(u)); err != nil {
			return err
		}
	}
	return nil
}

// Rules returns client-go's loading rules, as kubectl applies them, with
// getenv for the environment: the explicit file if it is not empty (it
// must exist), else the files of $KUBECONFIG (a list separated as PATH
// is, merged: the first file to set a value wins), else
// $HOME/.kube/config. No file of the list need exist.
func Rules(explicit string, getenv func(string) string) *clientcmd.ClientConfigLoadingRules {
	rules := &clientcmd.ClientConfigLoadingRules{ExplicitPath: explicit}
	if env := getenv(clientcmd.RecommendedConfigPathEnvVar); env != "" {
		for _, f := range filepath.SplitList(env) {
			if f != "" {
				rules.Precedence = append(rules.Precedence, f)
			}
		}
	} else if home := getenv("HOME"); home != "" {
		rules.Precedence = []string{filepath.Join(home, clientcmd.RecommendedHomeDir, clientcmd.RecommendedFileName)}
	}
	return rules
}

// Files returns the files client-go reads for rules: the explicit one, or
// those of the list that exist.
func Files(rules *clientcmd.ClientConfigLoadingRules) []string {
	if rules.ExplicitPath != "" {
		return []string{rules.ExplicitPath}
	}
	var out []string
	for _, f := range rules.Precedence {
		if _, err := os.Stat(f); err == nil {
			out = append(out, f)
		}
	}
	return out
}

// Load returns the client config of context (empty: the current context
// of the merged files) under rules. It first reads each file of
// Files(rules) up to limited.MaxFile, then the files the chosen context
// names (CheckContext), and reports the first that cannot be read or is
// larger, naming it: client-go reads them all whole.
func Load(rules *clientcmd.ClientConfigLoadingRules, context string) (*rest.Config, error) {
	for _, f := range Files(rules) {
		if _, err := limited.ReadFile(f, limited.MaxFile); err != nil {
			return nil, fmt.Errorf("%q: %w", f, err)
		}
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: context})
	raw, err := cc.RawConfig()
	if err != nil {
		return nil, err
	}
	name := context
	if name == "" {
		name = raw.CurrentContext
	}
	// The merged config's file names are absolute (client-go resolves
	// them against the file that gave them).
	if err := CheckContext(&raw, name, ""); err != nil {
		return nil, fmt.Errorf("context %q: %w", name, err)
	}
	return cc.ClientConfig()
}
