package kubestore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipamkit/ipam/store"
)

// Watch tuning.
const (
	// watchPage is the page size of the list that a Watch starts from.
	watchPage = 500
	// watchTimeout is how long one watch request lasts before the server
	// ends it and Watch makes the next, from where it got to.
	watchTimeout = 5 * time.Minute
	// Delays between attempts while the API server cannot be reached.
	retryMin, retryMax = 100 * time.Millisecond, 5 * time.Second
)

// errGone is returned by follow when the server no longer has the history
// to continue from.
var errGone = errors.New("watch history compacted")

// Watch calls h.Reset with every valid IPClaim, from a consistent list (in
// pages), then h.Apply with each change after it, from a watch that starts
// at the list's resourceVersion and resumes where it got to when the
// connection ends. When the server has compacted the history it would
// resume from (410 Gone), Watch lists again and calls h.Reset. While the
// server cannot be reached, it retries with a growing delay (up to 5 s)
// until ctx is done, and then returns ctx's error.
//
// Objects that are no valid claims are skipped and logged (Options.Logger),
// naming the object and the field.
func (s *Store) Watch(ctx context.Context, h store.WatchHandler) error {
	delay := retryMin
	wait := func(err error) error {
		s.log.Warn("kubestore: watch interrupted", "err", err, "retry", delay)
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return ctx.Err()
		}
		delay = min(2*delay, retryMax)
		return nil
	}
	for {
		rv, err := s.reset(ctx, h)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if err := wait(err); err != nil {
				return err
			}
			continue
		}
		delay = retryMin
		for {
			var progressed bool
			rv, progressed, err = s.follow(ctx, h, rv)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errors.Is(err, errGone) {
				break // list again
			}
			if progressed {
				delay = retryMin
			}
			if err != nil {
				if err := wait(err); err != nil {
					return err
				}
			}
		}
	}
}

// reset lists every IPClaim and hands the valid ones to h.Reset; it returns
// the list's resourceVersion.
func (s *Store) reset(ctx context.Context, h store.WatchHandler) (string, error) {
	var claims []store.Claim
	rv, err := s.eachClaim(ctx, func(item json.RawMessage) bool {
		c, _, err := decodeClaim(item)
		if err != nil {
			s.log.Warn("kubestore: watch skips an object that is no valid claim", "err", err)
			return true
		}
		claims = append(claims, c)
		return true
	})
	if err != nil {
		return "", err
	}
	h.Reset(claims)
	return rv, nil
}

// watchEvent is one event of a watch stream, decoded in one pass: its
// object is read as a claim and as the Status of an ERROR event, whose
// fields a claim does not have; a BOOKMARK's object has only its
// resourceVersion.
type watchEvent struct {
	Type   string      `json:"type"`
	Object eventObject `json:"object"`
}

type eventObject struct {
	storedClaim
	Code    int32                 `json:"code"`
	Reason  metav1.StatusReason   `json:"reason"`
	Message string                `json:"message"`
	Details *metav1.StatusDetails `json:"details"`
}

// follow watches from rv and hands each change to h.Apply until the stream
// ends. It returns the resourceVersion it got to, whether it got anywhere,
// and why the stream ended: nil when the server closed it, errGone when rv
// is too old.
func (s *Store) follow(ctx context.Context, h store.WatchHandler, rv string) (string, bool, error) {
	stream, err := s.client.Get().Resource(ClaimResource).
		Param("watch", "true").
		Param("resourceVersion", rv).
		Param("allowWatchBookmarks", "true").
		Param("timeoutSeconds", strconv.Itoa(int(watchTimeout/time.Second))).
		Timeout(watchTimeout + time.Minute).
		Stream(ctx)
	if err != nil {
		if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
			return rv, false, errGone
		}
		return rv, false, err
	}
	defer stream.Close()
	dec := json.NewDecoder(stream)
	progressed := false
	for {
		var e watchEvent
		err := dec.Decode(&e)
		// A field of the wrong type spoils only its event: the decoder
		// has read the whole of it, and goes on with the next.
		var typeErr *json.UnmarshalTypeError
		if err != nil && !errors.As(err, &typeErr) {
			if errors.Is(err, io.EOF) {
				err = nil
			}
			return rv, progressed, err
		}
		progressed = true
		o := &e.Object
		switch e.Type {
		case "ADDED", "MODIFIED", "DELETED":
			if o.Metadata.ResourceVersion != "" {
				rv = o.Metadata.ResourceVersion
			}
			c, err := o.claim()
			if typeErr != nil {
				err = &CorruptError{Name: o.Metadata.Name, Field: strings.TrimPrefix(typeErr.Field, "object."),
					Value: "a JSON " + typeErr.Value, Reason: "not a " + typeErr.Type.String()}
			}
			if err != nil {
				s.log.Warn("kubestore: watch skips an object that is no valid claim", "event", e.Type, "err", err)
				continue
			}
			h.Apply(store.Event{Claim: c, Deleted: e.Type == "DELETED"})
		case "BOOKMARK":
			if v := o.Metadata.ResourceVersion; typeErr == nil && v != "" {
				rv = v
			}
		case "ERROR":
			if typeErr != nil {
				return rv, progressed, fmt.Errorf("watch error event that does not decode: %w", typeErr)
			}
			st := metav1.Status{Code: o.Code, Reason: o.Reason, Message: o.Message, Details: o.Details}
			if st.Code == http.StatusGone || st.Reason == metav1.StatusReasonExpired || st.Reason == metav1.StatusReasonGone {
				return rv, progressed, errGone
			}
			return rv, progressed, apierrors.FromObject(&st)
		default:
			return rv, progressed, fmt.Errorf("watch event of unknown type %q", e.Type)
		}
	}
}
