// Package kubeconfig checks a kubeconfig file before client-go reads it:
// client-go reads the file, and the files it names, whole, so that a
// kubeconfig of /dev/zero (or one naming /dev/zero as a certificate) runs a
// program out of memory.
package kubeconfig

import (
	"fmt"
	"path/filepath"

	"k8s.io/client-go/tools/clientcmd"

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
	check := func(what, name string, refs []*string) error {
		for _, ref := range refs {
			file := *ref
			if file == "" {
				continue
			}
			if !filepath.IsAbs(file) {
				file = filepath.Join(filepath.Dir(path), file)
			}
			if _, err := limited.ReadFile(file, limited.MaxFile); err != nil {
				return fmt.Errorf("%q: %s[%q]: file %q: %w", path, what, name, file, err)
			}
		}
		return nil
	}
	// The files of the current context, which client-go reads.
	kctx := cfg.Contexts[cfg.CurrentContext]
	if kctx == nil {
		return nil // client-go says what is missing
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
