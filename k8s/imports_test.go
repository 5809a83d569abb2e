package k8s

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImportGraph: the packages that talk to a cluster do without
// client-go's generated clientset and its informers, which register every
// API group when a program starts and compile a few hundred more packages
// (kubepools used dynamicinformer, which imports them, until it built its
// informers itself).
func TestImportGraph(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "./kubestore", "./kubepools", "./kubegc", "./kubeclient").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		for _, banned := range []string{"k8s.io/client-go/kubernetes", "k8s.io/client-go/informers", "k8s.io/client-go/dynamic/dynamicinformer"} {
			if pkg == banned || strings.HasPrefix(pkg, banned+"/") {
				t.Errorf("a package of the k8s module imports %s", pkg)
			}
		}
	}
}
