package kubetest

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// etcdStartTimeout bounds how long a single-member etcd may take to become
// ready; on this machine it takes 16–104 ms.
const etcdStartTimeout = 30 * time.Second

// startEtcd starts a single-member etcd with its data in dir, listening on
// 127.0.0.1 only, and returns it with its client URL. Ports are picked free
// and may be taken by someone else before etcd binds them: a start that fails
// is tried again with new ports.
func startEtcd(dir string) (*embed.Etcd, string, error) {
	var errs []error
	for attempt := range 5 {
		e, u, err := startEtcdOnce(dir, attempt)
		if err == nil {
			return e, u, nil
		}
		errs = append(errs, err)
	}
	return nil, "", fmt.Errorf("kubetest: starting etcd: %w", errors.Join(errs...))
}

func startEtcdOnce(dir string, attempt int) (*embed.Etcd, string, error) {
	c := embed.NewConfig()
	c.Name = "kubetest"
	c.Dir = fmt.Sprintf("%s/etcd-%d", dir, attempt)
	c.UnsafeNoFsync = true // test data only
	c.TickMs, c.ElectionMs = 10, 100
	c.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cu, err := freeLoopbackURL()
	if err != nil {
		return nil, "", err
	}
	pu, err := freeLoopbackURL()
	if err != nil {
		return nil, "", err
	}
	c.ListenClientUrls, c.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
	c.ListenPeerUrls, c.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
	c.InitialCluster = c.InitialClusterFromName(c.Name)
	e, err := embed.StartEtcd(c)
	if err != nil {
		return nil, "", err
	}
	select {
	case <-e.Server.ReadyNotify():
		return e, cu.String(), nil
	case err := <-e.Err():
		e.Close()
		return nil, "", err
	case <-time.After(etcdStartTimeout):
		e.Close()
		return nil, "", fmt.Errorf("etcd not ready after %s", etcdStartTimeout)
	}
}

// freeLoopbackURL returns an http URL on 127.0.0.1 with a port that was free
// a moment ago.
func freeLoopbackURL() (url.URL, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return url.URL{}, err
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		return url.URL{}, err
	}
	return url.URL{Scheme: "http", Host: addr}, nil
}
