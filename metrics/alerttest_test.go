package metrics_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestAlertRules runs the tests of alerttest, which evaluate alerts.yaml with
// Prometheus' own rule engine. That module stays outside go.work (the
// Prometheus server module is large and needs a newer Go release than the
// others, and would move the versions every other module builds with), so it
// is tested here, with GOWORK=off, and the one test command of the README
// covers it.
func TestAlertRules(t *testing.T) {
	if testing.Short() {
		t.Skip("builds Prometheus' rule engine")
	}
	gobin := filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	if _, err := os.Stat(gobin); err != nil {
		var lerr error
		if gobin, lerr = exec.LookPath("go"); lerr != nil {
			t.Skipf("no go command to build metrics/alerttest with: %v", lerr)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	args := []string{"test", "-count=1"}
	if raceEnabled {
		args = append(args, "-race")
	}
	cmd := exec.CommandContext(ctx, gobin, append(args, "./...")...)
	cmd.Dir = "alerttest"
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.CombinedOutput()
	t.Logf("go %v in alerttest:\n%s", args, out)
	if err != nil {
		t.Fatalf("metrics/alerttest: %v", err)
	}
}
