// Command report runs the side-by-side benchmarks of this module and writes
// their medians, and the ratios of this library to each peer, into the
// module's README.md, between the lines
//
//	<!-- report:begin -->
//	<!-- report:end -->
//
// with the machine, the Go version, the peer versions and the command. Run it
// from anywhere in the workspace:
//
//	go run ./benchmarks/cmd/report            # go test -bench . -count 5 -benchtime 1s
//	go run ./benchmarks/cmd/report -count 3 -benchtime 1x
//	go run ./benchmarks/cmd/report -from out.txt   # a saved `go test -bench` output
//
// It prints the benchmark output as it runs, and saves it with -raw.
package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

const (
	module     = "github.com/ipamkit/ipam/benchmarks"
	beginMark  = "<!-- report:begin -->"
	endMark    = "<!-- report:end -->"
	ours       = "ipam"
	oursFile   = "ipam-file"
	theirsDisk = "hostlocal-disk"
)

// The peer modules whose versions the report names.
var peerModules = []string{
	"github.com/containernetworking/plugins",
	"github.com/k8snetworkplumbingwg/whereabouts",
	"github.com/metal-stack/go-ipam",
}

// workload is one benchmark function of the module.
type workload struct {
	key, bench, what string
}

var workloads = []workload{
	{"a", "Fill20", "fill a /20 one by one"},
	{"b", "Holes16", "allocate the holes of a /16 99 % full"},
	{"c", "Cycle16", "allocate + release, /16 half full"},
	{"d", "FillIPv6", "first 10,000 of an IPv6 /64"},
	{"e", "ConcurrentFill20", "two goroutines fill one /20"},
}

// peer is a column of the tables.
type peer struct{ name, title string }

var memPeers = []peer{
	{"ipam", "ipam (memstore)"},
	{"bitmap", "bitmap"},
	{"hostlocal-mem", "host-local (FakeStore)"},
	{"hostlocal-index", "host-local (owner index)"},
	{"whereabouts", "Whereabouts"},
	{"goipam", "go-ipam"},
}

var diskPeers = []peer{
	{"ipam-file", "ipam (filestore)"},
	{"hostlocal-disk", "host-local (disk)"},
}

// The floor and the single-Allocate cases measured against it (the
// benchmarks BenchmarkEssentials and BenchmarkAllocate/<case>).
const (
	floorBench   = "Essentials"
	floorAtBench = "EssentialsAt" // the floor on each case's data
	// floorInterleaved is the metric of each BenchmarkAllocate case: its
	// time over the floor's, timed in turns between its windows.
	floorInterleaved = "×floor"
	allocateBench    = "Allocate"
	floorMax         = 4 // the target: Allocate within 4× of the floor ...
	allocsMax        = 2 // ... with at most 2 heap allocations
)

var allocateCases = func() []string {
	var cs []string
	for _, bits := range []string{"24", "16", "12"} {
		for _, fill := range []string{"0%", "50%", "99%", "99.99%"} {
			cs = append(cs, "v4-"+bits+"/fill-"+fill)
		}
	}
	return cs
}()

var extraPeers = []peer{
	{"ipam-2alloc", "ipam, 2 Allocators"},
}

func main() {
	count := flag.Int("count", 5, "runs of each benchmark; the report shows medians")
	benchtime := flag.String("benchtime", "1s", "go test -benchtime")
	bench := flag.String("bench", ".", "go test -bench")
	from := flag.String("from", "", "read this saved `go test -bench` output instead of running the benchmarks")
	raw := flag.String("raw", "", "also save the benchmark output to this file")
	readme := flag.String("readme", "", "the README to write (default: the module's README.md)")
	dryRun := flag.Bool("n", false, "print the report instead of writing the README")
	flag.Parse()
	if err := run(*count, *benchtime, *bench, *from, *raw, *readme, *dryRun); err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
}

func run(count int, benchtime, bench, from, raw, readme string, dryRun bool) error {
	dir, err := moduleDir()
	if err != nil {
		return err
	}
	if readme == "" {
		readme = filepath.Join(dir, "README.md")
	}
	args := []string{"test", "-run", "^$", "-bench", bench, "-benchtime", benchtime, "-count", strconv.Itoa(count), "-timeout", "60m", "."}
	env := environment{
		Files:     filesystem(os.TempDir()),
		Date:      time.Now().UTC(),
		CPU:       cpuModel(),
		NumCPU:    runtime.NumCPU(),
		Memory:    memTotal(),
		Go:        goVersion(dir),
		Peers:     peerVersions(dir),
		Command:   "cd benchmarks && go " + shellJoin(args),
		Report:    reportCommand(count, benchtime, bench),
		LoadStart: loadAvg(),
	}
	var out []byte
	if from != "" {
		if out, err = os.ReadFile(from); err != nil {
			return err
		}
		// The saved run's command is taken to be the one these flags make.
		env.Saved, env.LoadStart, env.Files = true, "", ""
		env.Report = reportCommand(count, benchtime, bench) + " -from " + from
	} else {
		start := time.Now()
		fmt.Fprintf(os.Stderr, "running: %s\n", env.Command)
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		var buf bytes.Buffer
		cmd.Stdout = io.MultiWriter(&buf, os.Stderr)
		cmd.Stderr = os.Stderr
		err := cmd.Run()
		out = buf.Bytes()
		env.Elapsed = time.Since(start).Round(time.Second)
		env.LoadEnd = loadAvg()
		if raw != "" {
			if werr := os.WriteFile(raw, out, 0o644); werr != nil {
				return werr
			}
		}
		if err != nil {
			return fmt.Errorf("go test: %w", err)
		}
	}
	res, err := parse(bytes.NewReader(out))
	if err != nil {
		return err
	}
	if res.cpu != "" && res.cpu != env.CPU {
		env.CPU = strings.TrimSpace(env.CPU + " (go test: " + res.cpu + ")")
	}
	text := render(env, res)
	if dryRun {
		fmt.Print(text)
		return nil
	}
	return splice(readme, text)
}

// ---- environment ----

type environment struct {
	Saved              bool   // rendered from a saved output (-from)
	Files              string // where the file stores write, and its filesystem
	Date               time.Time
	CPU                string
	NumCPU             int
	Memory             string
	Go                 string
	Peers              []string
	Command, Report    string
	LoadStart, LoadEnd string
	Elapsed            time.Duration
}

func moduleDir() (string, error) {
	out, err := exec.Command("go", "list", "-f", "{{.Dir}}", module).Output()
	if err != nil {
		return "", fmt.Errorf("finding module %s (run inside the workspace): %w", module, err)
	}
	return strings.TrimSpace(string(out)), nil
}

func cpuModel() string {
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	for line := range strings.Lines(string(data)) {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func memTotal() string {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return ""
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			if err == nil {
				return fmt.Sprintf("%.0f GiB", kb/(1<<20))
			}
		}
	}
	return ""
}

// filesystem names dir and its filesystem type, as stat(1) reports it.
func filesystem(dir string) string {
	out, err := exec.Command("stat", "-f", "-c", "%T", dir).Output()
	if err != nil {
		return "`" + dir + "`"
	}
	fs := strings.TrimSpace(string(out))
	if fs == "ext2/ext3" {
		fs = "ext2/3/4" // stat names ext4 by the magic number it shares
	}
	return fmt.Sprintf("`%s` (%s)", dir, fs)
}

func loadAvg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

func goVersion(dir string) string {
	cmd := exec.Command("go", "version")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return runtime.Version()
	}
	return strings.TrimPrefix(strings.TrimSpace(string(out)), "go version ")
}

func peerVersions(dir string) []string {
	cmd := exec.Command("go", append([]string{"list", "-m", "-f", "{{.Path}} {{.Version}}"}, peerModules...)...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return nil
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

func reportCommand(count int, benchtime, bench string) string {
	s := "go run ./benchmarks/cmd/report"
	if count != 5 {
		s += " -count " + strconv.Itoa(count)
	}
	if benchtime != "1s" {
		s += " -benchtime " + benchtime
	}
	if bench != "." {
		s += " -bench " + shellQuote(bench)
	}
	return s
}

func shellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = shellQuote(a)
	}
	return strings.Join(q, " ")
}

func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// ---- parsing ----

// results holds every value of every metric of every benchmark, by
// workload, peer and unit.
type results struct {
	cpu    string
	values map[string]map[string]map[string][]float64
}

var procSuffix = regexp.MustCompile(`-\d+$`)

func parse(r io.Reader) (*results, error) {
	res := &results{values: map[string]map[string]map[string][]float64{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	lines := 0
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "cpu: "); ok {
			res.cpu = strings.TrimSpace(v)
			continue
		}
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") || len(f)%2 != 0 {
			continue
		}
		if _, err := strconv.Atoi(f[1]); err != nil {
			continue
		}
		name := procSuffix.ReplaceAllString(strings.TrimPrefix(f[0], "Benchmark"), "")
		bench, peer, _ := strings.Cut(name, "/") // peer "": a benchmark of its own, such as Essentials
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			res.add(bench, peer, f[i+1], v)
		}
		lines++
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if lines == 0 {
		return nil, errors.New("no benchmark results in the output")
	}
	return res, nil
}

func (r *results) add(bench, peer, unit string, v float64) {
	if r.values[bench] == nil {
		r.values[bench] = map[string]map[string][]float64{}
	}
	if r.values[bench][peer] == nil {
		r.values[bench][peer] = map[string][]float64{}
	}
	r.values[bench][peer][unit] = append(r.values[bench][peer][unit], v)
}

// median returns the median of a metric, and false if it was not measured.
func (r *results) median(bench, peer, unit string) (float64, bool) {
	vs := r.values[bench][peer][unit]
	if len(vs) == 0 {
		return 0, false
	}
	vs = slices.Sorted(slices.Values(vs))
	n := len(vs)
	if n%2 == 1 {
		return vs[n/2], true
	}
	return (vs[n/2-1] + vs[n/2]) / 2, true
}

// runs returns how many values a metric has.
func (r *results) runs(bench, peer, unit string) int { return len(r.values[bench][peer][unit]) }

// spread returns (max-min)/median of a metric, a measure of the noise.
func (r *results) spread(bench, peer, unit string) (float64, bool) {
	vs := r.values[bench][peer][unit]
	m, ok := r.median(bench, peer, unit)
	if !ok || len(vs) < 2 || m == 0 {
		return 0, false
	}
	return (slices.Max(vs) - slices.Min(vs)) / m, true
}

// ---- rendering ----

func render(env environment, r *results) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }

	p("%s\n", beginMark)
	p("<!-- Written by `go run ./benchmarks/cmd/report`; edits here are overwritten. -->\n\n")
	if !env.Saved {
		p("Run of %s", env.Date.Format("2006-01-02 15:04 MST"))
	} else {
		p("Rendered %s from a saved run", env.Date.Format("2006-01-02 15:04 MST"))
	}
	if env.Elapsed > 0 {
		p(", %s in all", env.Elapsed)
	}
	p(".\n\n")
	p("- Machine: %s, %d CPUs", orDash(env.CPU), env.NumCPU)
	if env.Memory != "" {
		p(", %s", env.Memory)
	}
	p(".")
	if env.LoadStart != "" {
		p(" Load average (1, 5, 15 min) %s at the start", env.LoadStart)
		if env.LoadEnd != "" {
			p(", %s at the end", env.LoadEnd)
		}
		p(".")
	}
	p("\n- Go: %s.\n", env.Go)
	if env.Files != "" && measuredAny(r, diskPeers) {
		p("- Files of ipam (filestore) and host-local (disk) under %s.\n", env.Files)
	}
	if len(env.Peers) > 0 {
		p("- Peers: %s.\n", "`"+strings.Join(env.Peers, "`, `")+"`")
	}
	if env.Saved {
		p("- From a saved output of `%s`, through `%s`.\n", env.Command, env.Report)
	} else {
		p("- Command: `%s`, through `%s`.\n", env.Command, env.Report)
	}
	p("\n")

	all := slices.Concat(memPeers, diskPeers)
	p("#### Time per allocation (median)\n\n")
	p("One op is one allocation (c: one allocation and one release); e is wall time over the two goroutines.\n\n")
	header(&b, "", all)
	for _, w := range workloads {
		p("| %s %s |", w.key, w.what)
		for _, pe := range all {
			if v, ok := r.median(w.bench, pe.name, "ns/op"); ok {
				p(" %s |", duration(v))
			} else {
				p(" — |")
			}
		}
		p("\n")
	}
	for _, pe := range extraPeers {
		if v, ok := r.median("ConcurrentFill20", pe.name, "ns/op"); ok {
			p("\ne with %s on one memstore (each with its own index, the store deciding races): %s per allocation.\n", strings.TrimPrefix(pe.title, "ipam, "), duration(v))
		}
	}
	if worst, name := noisiest(r, all); worst > 0.2 {
		p("\nThe noisiest figure (%s) spread %.0f %% between its runs (max − min over median).\n", name, worst*100)
	}

	p("\n#### This library ÷ peer, time per allocation\n\n")
	p("1/250 means this library takes 1/250 of the peer's time (250× faster); 12 means it takes 12 times as long. The file-store column compares ipam (filestore) with host-local (disk): a long-lived Allocator that read the directory once before the timer started, as a node daemon runs, not a CNI plugin process started per ADD; neither store fsyncs (the filestore's Options.Sync is off).\n\n")
	ratioCols := slices.Concat(memPeers[1:], []peer{{theirsDisk, "filestore ÷ host-local (disk)"}})
	header(&b, "", ratioCols)
	for _, w := range workloads {
		p("| %s %s |", w.key, w.what)
		for _, pe := range ratioCols {
			mine := ours
			if pe.name == theirsDisk {
				mine = oursFile
			}
			if q, ok := ratio(r, w.bench, mine, pe.name); ok {
				p(" %s |", formatRatio(q))
			} else {
				p(" — |")
			}
		}
		p("\n")
	}

	p("\n#### Heap allocations per op (median): allocs/op, B/op\n\n")
	header(&b, "", all)
	for _, w := range workloads {
		p("| %s |", w.key)
		for _, pe := range all {
			a, ok1 := r.median(w.bench, pe.name, "allocs/op")
			by, ok2 := r.median(w.bench, pe.name, "B/op")
			if ok1 && ok2 {
				p(" %s, %s |", trim(a), trim(by))
			} else {
				p(" — |")
			}
		}
		p("\n")
	}

	p("\n#### d: heap retained per address, e: addresses handed out twice\n\n")
	concurrent := slices.Concat(memPeers[:1], extraPeers, memPeers[1:])
	header(&b, "", concurrent)
	p("| d retained B per address |")
	for _, pe := range concurrent {
		if v, ok := r.median("FillIPv6", pe.name, "retained-B/alloc"); ok {
			p(" %s |", trim(v))
		} else {
			p(" — |")
		}
	}
	p("\n| e dups (all runs) |")
	for _, pe := range concurrent {
		p(" %s |", sumCell(r, "ConcurrentFill20", pe.name, "dups"))
	}
	p("\n| e failed allocations (all runs) |")
	for _, pe := range concurrent {
		p(" %s |", sumCell(r, "ConcurrentFill20", pe.name, "errs"))
	}
	p("\n")

	p("\n#### Against the targets\n\n")
	p("| target | measured | |\n|---|---|---|\n")
	target := func(what string, checks []check) {
		var parts []string
		met, known := true, false
		for _, c := range checks {
			q, ok := ratio(r, c.bench, c.mine, c.peer)
			if !ok {
				parts = append(parts, c.label+" not measured")
				met = false
				continue
			}
			known = true
			parts = append(parts, c.label+" "+formatRatio(q))
			if q > c.max {
				met = false
			}
		}
		verdict := "**not met**"
		switch {
		case met && known:
			verdict = "met"
		case !known:
			verdict = "not measured"
		}
		p("| %s | %s | %s |\n", what, strings.Join(parts, "; "), verdict)
	}
	target("ipam (memstore) at least 100× faster than host-local's in-memory allocator on b and c",
		[]check{{"b", "Holes16", ours, "hostlocal-mem", 0.01}, {"c", "Cycle16", ours, "hostlocal-mem", 0.01}})
	target("ipam (memstore) at least 1,000× faster than go-ipam on b and c",
		[]check{{"b", "Holes16", ours, "goipam", 0.001}, {"c", "Cycle16", ours, "goipam", 0.001}})
	target("ipam (memstore) at least 1,000× faster than Whereabouts on b and c",
		[]check{{"b", "Holes16", ours, "whereabouts", 0.001}, {"c", "Cycle16", ours, "whereabouts", 0.001}})
	var bm []check
	for _, w := range workloads {
		bm = append(bm, check{w.key, w.bench, ours, "bitmap", 5})
	}
	target("ipam (memstore) within 5× of the plain bitmap on every workload", bm)
	target("ipam (filestore) at least 100× faster than host-local's disk store on a and b (long-lived Allocator, no fsync)",
		[]check{{"a", "Fill20", oursFile, theirsDisk, 0.01}, {"b", "Holes16", oursFile, theirsDisk, 0.01}})
	var dupsCells []string
	dupsOK, dupsKnown := true, false
	for _, pe := range concurrent {
		if n := r.runs("ConcurrentFill20", pe.name, "dups"); n > 0 {
			dupsKnown = true
			s := sumCell(r, "ConcurrentFill20", pe.name, "dups")
			if s != "0" {
				dupsOK = false
			}
			dupsCells = append(dupsCells, pe.name+" "+s)
		}
	}
	verdict := "not measured"
	if dupsKnown {
		verdict = map[bool]string{true: "met", false: "**not met**"}[dupsOK]
	}
	p("| e: no address handed out twice, by anyone | %s | %s |\n", strings.Join(dupsCells, ", "), verdict)
	p("%s", floorTarget(r))
	p("%s", floorSection(r))
	p("\n%s\n", endMark)
	return b.String()
}

// floorRatios returns, for each case of BenchmarkAllocate that ran, its
// median time over the floor's, and the floor's median.
func floorRatios(r *results) (ratios map[string]float64, floor float64, ok bool) {
	floor, ok = r.median(floorBench, "", "ns/op")
	if !ok || floor == 0 {
		return nil, 0, false
	}
	ratios = map[string]float64{}
	for _, c := range allocateCases {
		if v, ok := r.median(allocateBench, c, "ns/op"); ok {
			ratios[c] = v / floor
			// The same case's ratio to the floor timed between its
			// windows (floorInterleaved), if larger: the verdict takes
			// the less flattering of the two.
			if q, ok := r.median(allocateBench, c, floorInterleaved); ok && q > ratios[c] {
				ratios[c] = q
			}
		}
	}
	return ratios, floor, true
}

// floorTarget is the row of the targets table for Allocate against the floor.
func floorTarget(r *results) string {
	const what = "ipam Allocate (memstore) within 4× of the floor (`BenchmarkEssentials`) with at most 2 allocations, on every case of `BenchmarkAllocate`"
	ratios, _, ok := floorRatios(r)
	if !ok || len(ratios) == 0 {
		return "| " + what + " | — | not measured |\n"
	}
	worst, worstCase, allocs := 0.0, "", 0.0
	for _, c := range allocateCases {
		if q, ok := ratios[c]; ok && q > worst {
			worst, worstCase = q, c
		}
		if a, ok := r.median(allocateBench, c, "allocs/op"); ok {
			allocs = max(allocs, a)
		}
	}
	best := worst
	for _, q := range ratios {
		best = min(best, q)
	}
	verdict := "met"
	if len(ratios) < len(allocateCases) {
		verdict = "**not met** (" + strconv.Itoa(len(allocateCases)-len(ratios)) + " cases not measured)"
	} else if worst > floorMax || allocs > allocsMax {
		verdict = "**not met**"
	}
	return fmt.Sprintf("| %s | %s to %s × the floor (worst %s); at most %s allocations | %s |\n",
		what, formatRatio(best), formatRatio(worst), worstCase, trim(allocs), verdict)
}

// floorSection is the table of BenchmarkAllocate's cases against the floor.
func floorSection(r *results) string {
	ratios, floor, ok := floorRatios(r)
	if !ok {
		return ""
	}
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("\n#### Allocate against the floor\n\n")
	p("The floor, `BenchmarkEssentials`, is the least an Allocate must do with this library's guarantees, written out with nothing else: a clock read (the claim's time), an owner lookup and insert by string ID (idempotency), a bit taken after the round-robin cursor, a claim record written into a block of consecutive addresses, all in one critical section, and a one-address result allocated (see `essentials_test.go`). It took %s per allocation in this run", duration(floor))
	if a, ok := r.median(floorBench, "", "allocs/op"); ok {
		by, _ := r.median(floorBench, "", "B/op")
		p(" (%s allocation, %s B)", trim(a), trim(by))
	}
	p(". `BenchmarkAllocate` is one `Allocator.Allocate` through the public API into memstore, as the root package's benchmark of that name measures it: one address for a new owner, in a pool filled at random to a level.\n\n")
	if len(ratios) == 0 {
		p("`BenchmarkAllocate` did not run.\n")
		return b.String()
	}
	p("`BenchmarkEssentialsAt` is the same floor on each case's data: as many addresses, as many of them claimed, each with its record and its owner's entry. It is not the target's measure; it tells how much of the distance is the size of the data, which a Store holding that many claims misses in cache, rather than the work.\n\n")
	p("Each case also times the floor between its windows of allocations, in turns of a few microseconds, so that the two meet the same machine: a shared machine's speed drifts from one minute to the next, and with it a ratio of figures taken apart. `× floor, in turns` is the median of those ratios; the verdict above takes, for each case, the larger of the two ratios.\n\n")
	p("| case | Allocate (median) | allocs/op, B/op | ÷ floor | × floor, in turns | floor on the case's data | Allocate ÷ that |\n|---|---:|---:|---:|---:|---:|---:|\n")
	for _, c := range allocateCases {
		if _, ok := ratios[c]; !ok {
			continue
		}
		v, _ := r.median(allocateBench, c, "ns/op")
		q := v / floor
		turns := "—"
		if t, ok := r.median(allocateBench, c, floorInterleaved); ok {
			turns = formatRatio(t)
		}
		a, _ := r.median(allocateBench, c, "allocs/op")
		by, _ := r.median(allocateBench, c, "B/op")
		at, atRatio := "—", "—"
		if f, ok := r.median(floorAtBench, c, "ns/op"); ok && f > 0 {
			at, atRatio = duration(f), formatRatio(v/f)
		}
		p("| %s | %s | %s, %s | %s | %s | %s | %s |\n", c, duration(v), trim(a), trim(by), formatRatio(q), turns, at, atRatio)
	}
	return b.String()
}

type check struct {
	label, bench, mine, peer string
	max                      float64 // the largest ratio that meets the target
}

func header(b *strings.Builder, first string, cols []peer) {
	fmt.Fprintf(b, "| %s |", first)
	for _, c := range cols {
		fmt.Fprintf(b, " %s |", c.title)
	}
	fmt.Fprintf(b, "\n|---|")
	for range cols {
		fmt.Fprintf(b, "---:|")
	}
	fmt.Fprintf(b, "\n")
}

func ratio(r *results, bench, mine, peer string) (float64, bool) {
	a, ok1 := r.median(bench, mine, "ns/op")
	b, ok2 := r.median(bench, peer, "ns/op")
	if !ok1 || !ok2 || b == 0 {
		return 0, false
	}
	return a / b, true
}

// measuredAny reports whether any of peers has a figure in r.
func measuredAny(r *results, peers []peer) bool {
	for _, w := range workloads {
		for _, pe := range peers {
			if r.runs(w.bench, pe.name, "ns/op") > 0 {
				return true
			}
		}
	}
	return false
}

func noisiest(r *results, peers []peer) (float64, string) {
	worst, name := 0.0, ""
	for _, w := range workloads {
		for _, pe := range peers {
			if s, ok := r.spread(w.bench, pe.name, "ns/op"); ok && s > worst {
				worst, name = s, w.key+" on "+pe.title
			}
		}
	}
	return worst, name
}

func sumCell(r *results, bench, peer, unit string) string {
	vs := r.values[bench][peer][unit]
	if len(vs) == 0 {
		return "—"
	}
	var s float64
	for _, v := range vs {
		s += v
	}
	return trim(s)
}

// formatRatio writes q < 1 as 1/N and q >= 1 as a plain factor, each with
// one decimal under 10.
func formatRatio(q float64) string {
	if q < 1 {
		if 1/q < 10 {
			return "1/" + strconv.FormatFloat(1/q, 'f', 1, 64)
		}
		return "1/" + group(sig(1/q))
	}
	if q < 10 {
		return strconv.FormatFloat(q, 'f', 1, 64)
	}
	return group(sig(q))
}

// sig rounds v to three significant digits.
func sig(v float64) float64 {
	if v <= 0 {
		return v
	}
	scale := math.Pow(10, math.Floor(math.Log10(v))-2)
	return math.Round(v/scale) * scale
}

// group writes a whole number with thousands separators.
func group(v float64) string {
	s := strconv.FormatFloat(math.Round(v), 'f', 0, 64)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func duration(ns float64) string {
	switch {
	case ns < 1e3:
		return three(ns) + " ns"
	case ns < 1e6:
		return three(ns/1e3) + " µs"
	case ns < 1e9:
		return three(ns/1e6) + " ms"
	}
	return three(ns/1e9) + " s"
}

// three writes v with three significant digits, or as a whole number if it
// has more before the point.
func three(v float64) string {
	if v <= 0 {
		return "0"
	}
	d := max(0, 2-int(math.Floor(math.Log10(v))))
	return strconv.FormatFloat(v, 'f', d, 64)
}

func trim(v float64) string {
	if v >= 100 || v == math.Trunc(v) {
		return group(v)
	}
	return three(v)
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

// splice replaces what lies between the markers in the README with text.
func splice(path, text string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	s := string(data)
	i := strings.Index(s, beginMark)
	j := strings.Index(s, endMark)
	if i < 0 || j < i {
		return fmt.Errorf("%s: no %s ... %s section to write the report into", path, beginMark, endMark)
	}
	s = s[:i] + text + strings.TrimPrefix(s[j+len(endMark):], "\n")
	return os.WriteFile(path, []byte(s), 0o644)
}
