package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ipamkit/ipam/cmd/internal/kubeconfig"
)

// stdinName is how standard input (-f -) is named in messages.
const stdinName = "stdin"

// defaultMaxInput is the default of -max-input: room for `kubectl get -o
// yaml` of a large cluster (20,000 pods with their managed fields is about
// 150 MB), and a bound on the memory an endless stream (-f /dev/zero, a pipe
// that never ends) can take before ipamctl stops reading it.
const defaultMaxInput = 256 << 20

// input is what a command reads: the -f files, in order, each at most
// maxInput bytes, and where "-f -" reads from.
type input struct {
	files    files
	maxInput byteSize
	stdin    io.Reader
	// kubeconfig and kubeContext choose a cluster as kubectl does
	// (--kubeconfig, --context; else $KUBECONFIG, else ~/.kube/config);
	// live says that the command reads it instead of files (chooseLive,
	// live.go).
	kubeconfig, kubeContext string
	live                    bool
	timeout                 time.Duration
	// getenv reads the environment ($KUBECONFIG, $HOME).
	getenv func(string) string
	// progress reports long work on stderr (--quiet silences it).
	progress *progress
}

// clusterNamed reports whether the command line names a cluster.
func (in *input) clusterNamed() bool { return in.kubeconfig != "" || in.kubeContext != "" }

// chooseLive decides whether a command that can read a cluster reads one:
// when --kubeconfig or --context is given, or, without -f, when the
// loading rules find a kubeconfig ($KUBECONFIG, ~/.kube/config).
func (in *input) chooseLive() {
	in.live = in.clusterNamed() ||
		len(in.files) == 0 && len(kubeconfig.Files(in.rules())) > 0
}

// rules are client-go's loading rules for this input.
func (in *input) rules() *clientcmd.ClientConfigLoadingRules {
	getenv := in.getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	return kubeconfig.Rules(in.kubeconfig, getenv)
}

// restConfig returns the client config of the cluster, with the rate
// limits a command-line tool wants: more requests per second than
// client-go's 5. Each kubeconfig file, and the files its context names,
// is read up to 4 MiB first: client-go reads them whole.
func (in *input) restConfig() (*rest.Config, error) {
	cfg, err := kubeconfig.Load(in.rules(), in.kubeContext)
	if err != nil {
		if in.kubeconfig != "" {
			return nil, fmt.Errorf("--kubeconfig %w", err)
		}
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = 50, 100
	cfg.UserAgent = "ipamctl"
	return cfg, nil
}

// bound returns ctx bounded by --timeout when a cluster is read
// (parseFlags refuses a timeout that is not positive).
func (in *input) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if !in.live {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, in.timeout)
}

// cluster reads the input: the files, or the cluster. An error means the
// cluster could not be read at all.
func (in *input) cluster(ctx context.Context) (*cluster, error) {
	if !in.live {
		return in.load(), nil
	}
	cfg, err := in.restConfig()
	if err != nil {
		return nil, err
	}
	c, err := loadLive(ctx, cfg, in.progress)
	in.progress.end()
	return c, err
}

// files is a repeatable -f flag.
type files []string

func (f *files) String() string { return strings.Join(*f, ",") }

func (f *files) Set(s string) error {
	if s == "" {
		return errors.New("empty file name")
	}
	if s == "-" && f.hasStdin() {
		return errors.New(`"-" (standard input) named twice`)
	}
	*f = append(*f, s)
	return nil
}

func (f *files) hasStdin() bool {
	for _, s := range *f {
		if s == "-" {
			return true
		}
	}
	return false
}

// byteSize is a size flag: a number of bytes, or a number with a unit (KiB,
// MiB, GiB, or KB, MB, GB).
type byteSize int64

// sizeUnits are the units of a byteSize, binary ones first (String uses
// them) and "B" last (every other unit ends with it too).
var sizeUnits = []struct {
	suffix string
	size   int64
}{
	{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10},
	{"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"B", 1},
}

func (b *byteSize) String() string {
	n := int64(*b)
	for _, u := range sizeUnits[:3] {
		if n >= u.size && n%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

func (b *byteSize) Set(s string) error {
	num, unit := s, int64(1)
	for _, u := range sizeUnits {
		if rest, ok := strings.CutSuffix(s, u.suffix); ok {
			num, unit = rest, u.size
			break
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(num), 10, 64)
	if err != nil || n <= 0 || n > (1<<62)/unit {
		return fmt.Errorf("%q: want a positive size such as 64MiB or 1GiB", s)
	}
	*b = byteSize(n * unit)
	return nil
}

// errTooLarge is returned, wrapped, for an input over the size limit.
var errTooLarge = errors.New("over the input size limit")

// read returns the content of the file named name ("-" for standard input)
// and the name to give it in messages, reading no more than the limit: a
// larger input is an error that says so and names the flag that raises it.
func (in *input) read(name string) (string, []byte, error) {
	r, display := in.stdin, stdinName
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			return name, nil, err
		}
		defer f.Close()
		r, display = f, name
	}
	limit := int64(in.maxInput)
	var buf bytes.Buffer
	if f, ok := r.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode().IsRegular() && st.Size() <= limit {
			buf.Grow(int(st.Size()) + bytes.MinRead)
		}
	}
	n, err := buf.ReadFrom(io.LimitReader(r, limit+1))
	switch {
	case err != nil:
		return display, nil, err
	case n > limit:
		return display, nil, fmt.Errorf("%w: more than %s read (raise it with -max-input)", errTooLarge, &in.maxInput)
	}
	return display, buf.Bytes(), nil
}
