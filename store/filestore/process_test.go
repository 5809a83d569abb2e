//go:build linux

package filestore_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ipamkit/ipam/store"
	"github.com/ipamkit/ipam/store/filestore"
)

// The helper process: TestHelperProcess, run in a child by TestProcessRace,
// TestCrash, TestExclusiveProcessRace and TestIndexCrash, reads what to do
// from these variables.
const (
	helperEnv = "FILESTORE_HELPER" // "race", "crash", "exclusive" or "step"
	dirEnv    = "FILESTORE_DIR"
	idEnv     = "FILESTORE_ID" // the container ID; for "step", the scenario
	syncEnv   = "FILESTORE_SYNC"
	countEnv  = "FILESTORE_COUNT" // how many addresses the race is for
	stepEnv   = "FILESTORE_STEP"  // the step at which a "step" helper dies
)

// procPool is the pool the helper processes share.
var procPool = filestore.Pool{Name: "net/0", Prefixes: []netip.Prefix{
	netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8::/64")}}

// procAddr returns the i-th address of procPool: IPv4 and IPv6 alternately.
func procAddr(i int) netip.Addr {
	if i%2 == 0 {
		return netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
	}
	return netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 12: byte(i >> 24), 13: byte(i >> 16), 14: byte(i >> 8), 15: byte(i)})
}

// helper starts the test binary as a helper process of the given kind.
func helper(ctx context.Context, t *testing.T, kind, dir, id string, durable bool, count int) *exec.Cmd {
	return stepHelper(ctx, t, kind, dir, id, durable, count, "")
}

// stepHelper is helper with, for kind "step", the step to die at.
func stepHelper(ctx context.Context, t *testing.T, kind, dir, id string, durable bool, count int, step string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.CommandContext(ctx, exe, "-test.run=^TestHelperProcess$", "-test.count=1")
	// A race-enabled binary sleeps a second before exiting unless told not to.
	cmd.Env = append(os.Environ(), "GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"), helperEnv+"="+kind, dirEnv+"="+dir, idEnv+"="+id, syncEnv+"="+strconv.FormatBool(durable), countEnv+"="+strconv.Itoa(count))
	if kind == "step" {
		cmd.Env = append(cmd.Env, stepEnv+"="+step)
	}
	cmd.Stderr = os.Stderr
	return cmd
}

// TestHelperProcess is the helper process; without $FILESTORE_HELPER it does
// nothing.
func TestHelperProcess(t *testing.T) {
	kind := os.Getenv(helperEnv)
	if kind == "" {
		t.Skip("run by TestProcessRace and TestCrash")
	}
	durable, _ := strconv.ParseBool(os.Getenv(syncEnv))
	pools := []filestore.Pool{procPool}
	if kind == "step" {
		pools = testPools
	}
	s, err := filestore.Open(os.Getenv(dirEnv), filestore.Options{Pools: pools, Sync: durable})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	id := os.Getenv(idEnv)
	ctx := context.Background()
	out := os.Stdout // unbuffered: a line written is in the pipe before the next call
	switch kind {
	case "step":
		// Run scenario id, dying at the step named; say "done" if it
		// completes without reaching it.
		die := os.Getenv(stepEnv)
		filestore.SetHook(s, func(step string) {
			if step == die {
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {}
			}
		})
		if err := crashScenarios[id].run(ctx, s, os.Getenv(dirEnv)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Fprintln(out, "done")
	case "exclusive":
		// Wait for the start, then serve each container of the race once,
		// at an address of this process's own.
		bufio.NewReader(os.Stdin).ReadString('\n')
		n, _ := strconv.Atoi(os.Getenv(countEnv))
		p, _ := strconv.Atoi(strings.TrimPrefix(id, "proc-"))
		for i := range n {
			ctr := fmt.Sprintf("ctr-%d", i)
			_, err := s.CreateExclusive(ctx, store.Claim{Pool: procPool.Name, IP: procAddr(2 * (i*raceProcs + p)),
				Owner: store.Owner{ContainerID: ctr, Interface: "eth0"}})
			switch {
			case err == nil:
				fmt.Fprintf(out, "won %s\n", ctr)
			case !errors.Is(err, store.ErrHeld):
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
		}
	case "race":
		// Wait for the start, then claim every address of the race.
		bufio.NewReader(os.Stdin).ReadString('\n')
		n, _ := strconv.Atoi(os.Getenv(countEnv))
		for i := range n {
			ip := procAddr(i)
			_, err := s.Create(ctx, store.Claim{Pool: procPool.Name, IP: ip, Owner: store.Owner{ContainerID: id, Interface: "eth0"}})
			switch {
			case err == nil:
				fmt.Fprintf(out, "won %s\n", ip)
			case !errors.Is(err, store.ErrExists):
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
		}
	case "crash":
		// Allocate as an allocator does, from the cursor on, until killed:
		// Create and set the cursor (in one call for every other helper, in
		// two for the rest), report; every third claim is then updated and
		// reported again.
		k, _ := strconv.Atoi(strings.TrimPrefix(id, "crash-"))
		combined := k%2 == 0
		fmt.Fprintln(out, "ready")
		cur, err := s.Cursor(ctx, procPool.Name)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		i := 0
		if cur.IsValid() {
			i = addrIndex(cur) + 1
		}
		for ; ; i++ {
			ip := procAddr(i)
			c := store.Claim{Pool: procPool.Name, IP: ip, Owner: store.Owner{ContainerID: id, Interface: "eth0"}}
			if combined {
				c, err = s.CreateAndSetCursor(ctx, c)
			} else {
				c, err = s.Create(ctx, c)
			}
			if errors.Is(err, store.ErrExists) {
				continue
			}
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			if !combined {
				if err := s.SetCursor(ctx, procPool.Name, ip); err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(1)
				}
			}
			fmt.Fprintf(out, "ok %s\n", ip)
			if i%3 == 0 {
				c.Owner = store.Owner{ContainerID: id + "-u", Interface: "eth1"}
				if _, err := s.Update(ctx, c, c.Revision); err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(1)
				}
				fmt.Fprintf(out, "upd %s\n", ip)
			}
		}
	}
	os.Exit(0)
}

// addrIndex inverts procAddr.
func addrIndex(ip netip.Addr) int {
	b := ip.As16()
	if ip.Is4() {
		return int(b[13])<<16 | int(b[14])<<8 | int(b[15])
	}
	return int(b[12])<<24 | int(b[13])<<16 | int(b[14])<<8 | int(b[15])
}

// raceProcs processes race for raceAddrs addresses, fewer with Options.Sync.
const raceProcs = 4

var raceAddrs = map[bool]int{false: 200, true: 60}

// race starts raceProcs helpers of kind on dir at once and returns, for
// each thing they report winning ("won <thing>"), the helpers that won it.
func race(t *testing.T, kind, dir string, durable bool, count int) map[string][]string {
	var (
		mu      sync.Mutex
		winners = map[string][]string{}
		wg      sync.WaitGroup
		starts  []io.WriteCloser
	)
	for p := range raceProcs {
		id := fmt.Sprintf("proc-%d", p)
		cmd := helper(t.Context(), t, kind, dir, id, durable, count)
		stdin, err := cmd.StdinPipe()
		require.NoError(t, err)
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		starts = append(starts, stdin)
		wg.Go(func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				if thing, ok := strings.CutPrefix(sc.Text(), "won "); ok {
					mu.Lock()
					winners[thing] = append(winners[thing], id)
					mu.Unlock()
				}
			}
			if err := cmd.Wait(); err != nil {
				t.Errorf("helper %s: %v", id, err)
			}
		})
	}
	for _, w := range starts {
		io.WriteString(w, "go\n")
		w.Close()
	}
	wg.Wait()
	return winners
}

// TestProcessRace has several processes claim the same addresses of one
// directory at once: each address must have exactly one winner, whose claim is
// on disk, intact.
func TestProcessRace(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	syncModes(t, func(t *testing.T, durable bool) {
		dir := t.TempDir()
		winners := race(t, "race", dir, durable, raceAddrs[durable]) // address: ids

		s, err := filestore.Open(dir, filestore.Options{Pools: []filestore.Pool{procPool}})
		require.NoError(t, err)
		defer s.Close()
		claims, err := s.List(t.Context(), procPool.Name)
		require.NoError(t, err)
		if len(claims) != raceAddrs[durable] {
			t.Errorf("List has %d claims, want %d", len(claims), raceAddrs[durable])
		}
		for i := range raceAddrs[durable] {
			ip := procAddr(i).String()
			ids := winners[ip]
			if len(ids) != 1 {
				t.Errorf("%s won by %q, want exactly one process", ip, ids)
				continue
			}
			b, err := os.ReadFile(filepath.Join(dir, ip))
			require.NoError(t, err)
			if want := ids[0] + "\r\neth0"; string(b) != want {
				t.Errorf("%s holds %q, want %q", ip, b, want)
			}
		}
	})
}

// crashKills is how many helper processes TestCrash kills without and with
// Options.Sync (whose fsyncs make every step slow, so fewer are killed), 210 in
// all, spread over crashWorkers running at once on one directory. Starting the
// helpers is most of the test's time, most of all under the race detector.
var crashKills = map[bool]int{false: 170, true: 40}

// crashDelay bounds the random time between a helper's start and its kill.
var crashDelay = map[bool]time.Duration{false: 3 * time.Millisecond, true: 15 * time.Millisecond}

const crashWorkers = 8

// TestCrash kills allocating processes with SIGKILL at random moments and
// checks what they leave: no empty or partial claim file, no address reported
// twice, every reported Create (and Update) on disk, a readable cursor (which
// the helpers' alternating IPv4 and IPv6 addresses make both grow, written in
// place, and shrink, replaced whole), and no temporary file once the
// directory is opened again.
func TestCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills processes")
	}
	syncModes(t, func(t *testing.T, durable bool) {
		dir := t.TempDir()
		seed := time.Now().UnixNano()
		t.Logf("seed %d", seed)
		var (
			mu    sync.Mutex
			state = map[string]string{} // address: the last content its helper reported
			by    = map[string]string{} // address: the helper that created it
			wg    sync.WaitGroup
		)
		for w := range crashWorkers {
			rnd := rand.New(rand.NewPCG(uint64(seed), uint64(w)))
			wg.Go(func() {
				for k := w; k < crashKills[durable]; k += crashWorkers {
					id := fmt.Sprintf("crash-%d", k)
					cmd := helper(t.Context(), t, "crash", dir, id, durable, 0)
					stdout, err := cmd.StdoutPipe()
					if err != nil {
						t.Error(err)
						return
					}
					if err := cmd.Start(); err != nil {
						t.Error(err)
						return
					}
					sc := bufio.NewScanner(stdout)
					if !sc.Scan() || sc.Text() != "ready" {
						t.Errorf("helper %s did not start: %q", id, sc.Text())
						cmd.Process.Kill()
						cmd.Wait()
						return
					}
					// Kill at a random moment: most often within the first
					// allocations, now and then later.
					time.Sleep(time.Duration(rnd.Int64N(int64(crashDelay[durable]))))
					cmd.Process.Signal(syscall.SIGKILL)
					for sc.Scan() {
						op, ip, _ := strings.Cut(sc.Text(), " ")
						mu.Lock()
						switch op {
						case "ok":
							if prev, ok := by[ip]; ok {
								t.Errorf("%s created by %s and by %s", ip, prev, id)
							}
							by[ip] = id
							state[ip] = id + "\r\neth0"
						case "upd":
							state[ip] = id + "-u\r\neth1"
						}
						mu.Unlock()
					}
					err = cmd.Wait()
					var exit *exec.ExitError
					if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
						t.Errorf("helper %s: %v, want killed", id, err)
					}
				}
			})
		}
		wg.Wait()

		valid := regexp.MustCompile(`^crash-\d+(\r\neth0|-u\r\neth1)$`)
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		files, temps := 0, 0
		for _, e := range entries {
			name := e.Name()
			switch {
			case strings.HasPrefix(name, ".tmp-"):
				temps++
				continue
			case name == "lock" || name == "last_reserved_ip.0":
				continue
			}
			files++
			b, err := os.ReadFile(filepath.Join(dir, name))
			require.NoError(t, err)
			if !valid.Match(b) {
				t.Errorf("%s holds %q: empty or partial", name, b)
			}
		}
		for ip, want := range state {
			b, err := os.ReadFile(filepath.Join(dir, ip))
			switch {
			case err != nil:
				t.Errorf("reported %s is not on disk: %v", ip, err)
			case string(b) != want && !(strings.HasSuffix(want, "eth0") && string(b) == strings.TrimSuffix(want, "\r\neth0")+"-u\r\neth1"):
				// A helper killed after its Update but before reporting it
				// leaves the updated content.
				t.Errorf("%s holds %q, want %q", ip, b, want)
			}
		}
		// Every reported Create set the cursor first; killed helpers may
		// have set it further on.
		cursor, err := os.ReadFile(filepath.Join(dir, "last_reserved_ip.0"))
		switch {
		case errors.Is(err, os.ErrNotExist) && len(state) == 0:
		case err != nil:
			t.Errorf("reading the cursor: %v", err)
		default:
			if ip, err := netip.ParseAddr(string(cursor)); err != nil || !procPool.Prefixes[0].Contains(ip) && !procPool.Prefixes[1].Contains(ip) {
				t.Errorf("last_reserved_ip.0 holds %q", cursor)
			}
		}

		s, err := filestore.Open(dir, filestore.Options{Pools: []filestore.Pool{procPool}})
		require.NoError(t, err)
		defer s.Close()
		after, err := os.ReadDir(dir)
		require.NoError(t, err)
		for _, e := range after {
			if strings.HasPrefix(e.Name(), ".tmp-") {
				t.Errorf("Open left %s", e.Name())
			}
		}
		claims, err := s.List(t.Context(), procPool.Name)
		require.NoError(t, err)
		if len(claims) != files {
			t.Errorf("List has %d claims, the directory %d claim files", len(claims), files)
		}
		t.Logf("%d kills, %d claims (%d reported), %d temporary files left and removed by Open",
			crashKills[durable], files, len(state), temps)
	})
}
