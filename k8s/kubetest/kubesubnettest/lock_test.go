package kubesubnettest

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/ipamkit/ipam/k8s/kubesubnet"
)

// lockRace makes candidates race for one lock: each one's first write of
// the record waits until every candidate has read it, so that they all
// write over the record they read empty.
type lockRace struct {
	candidates int
	reads      atomic.Int32
	allRead    chan struct{}   // closed once every candidate has read
	firsts     chan firstWrite // each candidate's first write
}

type firstWrite struct {
	id  string
	err error
}

func newLockRace(candidates int) *lockRace {
	return &lockRace{candidates: candidates, allRead: make(chan struct{}), firsts: make(chan firstWrite, candidates)}
}

// lock returns a candidate's lock in the race.
func (r *lockRace) lock(l *kubesubnet.AnnotationLock) resourcelock.Interface {
	return &racingLock{AnnotationLock: l, race: r}
}

// racingLock is an AnnotationLock in a lockRace.
type racingLock struct {
	*kubesubnet.AnnotationLock
	race              *lockRace
	readOnce, updated sync.Once
}

func (l *racingLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	rec, raw, err := l.AnnotationLock.Get(ctx)
	if err == nil {
		l.readOnce.Do(func() {
			if int(l.race.reads.Add(1)) == l.race.candidates {
				close(l.race.allRead)
			}
		})
	}
	return rec, raw, err
}

func (l *racingLock) Create(ctx context.Context, rec resourcelock.LeaderElectionRecord) error {
	if _, _, err := l.Get(ctx); err != nil {
		return err
	}
	return l.Update(ctx, rec)
}

func (l *racingLock) Update(ctx context.Context, rec resourcelock.LeaderElectionRecord) error {
	first := false
	l.updated.Do(func() { first = true })
	if !first {
		return l.AnnotationLock.Update(ctx, rec)
	}
	select {
	case <-l.race.allRead:
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Minute):
		// Report it below: the test wants both to race.
	}
	err := l.AnnotationLock.Update(ctx, rec)
	l.race.firsts <- firstWrite{l.ID, err}
	return err
}

// TestRunnerLockRace starts two Runners on one lock at once, each writing
// its claim to the lead over the record it read empty: the lock's write
// carries the resourceVersion it read, so one of them wins and the other
// gets a conflict and stands by. Without that precondition both writes
// would succeed, both Runners would lead, and two leaders would carve one
// subnet for two applications.
func TestRunnerLockRace(t *testing.T) {
	ctx := t.Context()
	ns, err := kube(t).CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ipam-race"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, kube(t).CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{}))
	})
	race := newLockRace(2)
	// Timings long enough that the winner keeps the lead on a loaded
	// machine: the test asks who won the first round only.
	timing := kubesubnet.Options{LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: time.Second}
	var stops []func()
	for _, id := range []string{"a", "b"} {
		opts := timing
		opts.Lock = race.lock(&kubesubnet.AnnotationLock{Client: dyn(t), Resource: nsResource, Name: ns.Name,
			Key: "ipam.ipamkit.io/subnet-runner", ID: id})
		r, _ := newRunner(t, opts)
		rctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- r.Run(rctx) }()
		stops = append(stops, func() {
			stop()
			require.ErrorIs(t, <-done, context.Canceled)
		})
	}
	t.Cleanup(func() {
		for _, stop := range stops {
			stop()
		}
	})

	var won []string
	for range 2 {
		select {
		case w := <-race.firsts:
			switch {
			case w.err == nil:
				won = append(won, w.id)
			case apierrors.IsConflict(w.err):
			default:
				t.Errorf("runner %s's first write of the lock: %v, want success or a conflict", w.id, w.err)
			}
		case <-time.After(2 * time.Minute):
			t.Fatal("the runners did not both write the lock within two minutes")
		}
	}
	select {
	case <-race.allRead:
	default:
		t.Fatal("a runner wrote the lock before the other had read it: they did not race")
	}
	if len(won) != 1 {
		t.Errorf("runners %v took the lock over one record they read, want exactly one", won)
	}
}
