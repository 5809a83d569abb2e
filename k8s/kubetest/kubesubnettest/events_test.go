package kubesubnettest

import (
	"context"
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"

	"github.com/ipamkit/ipam/k8s/kubesubnet"
)

// TestRunnerEvents runs a Runner on shared informer factories (as
// cmd/ipam-controller does) with an Events recorder: an application whose
// auto-pool cannot fit its subnet gets an AutoPoolFailed Event on the API
// server, one whose subnet has too few free addresses an AutoPoolWaiting
// Event, each with the reason in its note.
func TestRunnerEvents(t *testing.T) {
	ctx := t.Context()
	createSubnet(t, "events-4", "10.71.0.0/16", "10.71.1.1-10.71.1.6", "10.71.0.1")

	cs := kube(t)
	bctx, stopEvents := context.WithCancel(context.Background())
	t.Cleanup(stopEvents)
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: cs.EventsV1()})
	if err := broadcaster.StartRecordingToSinkWithContext(bctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(broadcaster.Shutdown)
	factory := informers.NewSharedInformerFactory(cs, 0)
	dynFactory := dynamicinformer.NewDynamicSharedInformerFactory(dyn(t), 0)
	r, logs := newRunner(t, kubesubnet.Options{
		Informers: factory, DynamicInformers: dynFactory,
		Events: broadcaster.NewRecorder(scheme.Scheme, "kubesubnettest"),
	})
	rctx, cancel := context.WithCancel(context.Background())
	factory.Start(rctx.Done())
	dynFactory.Start(rctx.Done())
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		factory.Shutdown()
		dynFactory.Shutdown()
	})

	// event waits for the Event of reason on StatefulSet events/name and
	// returns its note.
	event := func(name string, uid types.UID, reason string) string {
		t.Helper()
		var note string
		eventually(t, "the "+reason+" Event of StatefulSet "+name, func() (bool, string) {
			list, err := cs.EventsV1().Events("events").List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err.Error()
			}
			for _, e := range list.Items {
				if e.Reason == reason && e.Regarding.Kind == "StatefulSet" &&
					e.Regarding.Name == name && e.Regarding.UID == uid && e.Type == "Warning" {
					note = e.Note
					return true, ""
				}
			}
			return false, fmt.Sprintf("events %v; log:\n%s", list.Items, logs)
		})
		t.Logf("%s: %s", reason, note)
		return note
	}

	// 8 replicas (+1) need 9 addresses; the subnet has 6 in all: no pool.
	big := statefulSet(t, "events", "big", 8, subnetAnn("events-4"))
	if note := event("big", big.UID, kubesubnet.EventAutoPoolFailed); !strings.Contains(note, "totalIPCount") {
		t.Errorf("note %q: want the reason (totalIPCount)", note)
	}
	// hog takes 3 of the 6; db (3 replicas +1) needs 4 of the 3 left: it
	// waits.
	hog := statefulSet(t, "events", "hog", 2, subnetAnn("events-4"))
	hogPool := spiderpoolName(t, appOf(hog))
	eventually(t, "hog's pool", func() (bool, string) {
		_, ok, _ := poolIPs(t, hogPool)
		return ok, logs.String()
	})
	db := statefulSet(t, "events", "db", 3, subnetAnn("events-4"))
	if note := event("db", db.UID, kubesubnet.EventAutoPoolWaiting); !strings.Contains(note, "wait") || !strings.Contains(note, "events-4") {
		t.Errorf("note %q: want the subnet and the reason", note)
	}
}
