package etcd

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/connectivity"
)

// A lease (a node's, or the job's) is kept alive by the etcd client's stream, which renews it every third of its
// TTL (etcd's guidance). A renewal answered late does not make the lease lost: only etcd says whether it lives,
// and only an etcd that is gone makes it lost. The keeper:
//   - renews for as long as it runs: when the client gives up on the stream (no answer for a TTL), it renews
//     again at once, and asks etcd whether the lease lives: when etcd says it expired, the keeper ends
//     (errLeaseExpired: every key tied to it has vanished);
//   - takes etcd for lost when it has not answered for a TTL and the client has no connection to it (refused,
//     reset: etcd down or cut off), or, keeping a node's lease, when it has answered nothing for two TTLs and two
//     heartbeats over a connection that is up (an etcd that is up and answers nobody).
// So a loaded host, a GC pause or a thousand nodes joining at once delay the answers without losing anybody,
// and a dead etcd is noticed about a TTL after its last answer.

// errLeaseExpired: etcd says the lease is gone (expired or revoked): every key tied to it has vanished.
var errLeaseExpired = errors.New("the lease expired")

// keep keeps lease (of ttl seconds; whose, in words: "the job's", "this node's") alive in a goroutine of wg until
// the function returned is called; when it cannot (keepAlive), it calls lost with the ErrStoreLost error. The
// job's lease and each node's are kept by it: the one keeper.
func (e *etcdStore) keep(ctx context.Context, wg *sync.WaitGroup, lease clientv3.LeaseID, ttl int64, silence func() bool, whose string, log *zap.Logger,
	lost func(error)) context.CancelFunc {
	kctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	wg.Go(func() {
		if err := e.keepAlive(kctx, lease, time.Duration(ttl)*time.Second, silence, log); err != nil {
			lost(e.lost(fmt.Sprintf("%s lease %x could not be kept alive: %v", whose, int64(lease), err)))
		}
	})
	return cancel
}

// keepAlive keeps lease (of ttl) alive until ctx ends (nil), or until it cannot (see above). silence: whether a
// connected etcd that answers nothing is lost now (a node's lease, unless its world is forming: an etcd busy with a
// thousand joins is waited for, within the join's timeout); nil: never (the job's lease waits for its nodes' to
// say so).
func (e *etcdStore) keepAlive(ctx context.Context, lease clientv3.LeaseID, ttl time.Duration, silence func() bool, log *zap.Logger) error {
	last := time.Now()                 // etcd's last answer: the lease was just granted, or read
	limit := 2*ttl + 2*e.cfg.Heartbeat // how long a connected etcd may be silent
	check := time.NewTicker(min(e.cfg.Heartbeat, ttl) / 2)
	defer check.Stop()
	ka, err := e.cli.KeepAlive(ctx, lease)
	for err == nil {
		select {
		case <-ctx.Done():
			return nil
		case _, open := <-ka:
			if open {
				last = time.Now()
				continue
			}
			var answered bool
			if ka, answered, err = e.renewAgain(ctx, lease, ttl, log); answered {
				last = time.Now()
			}
		case <-check.C:
		}
		switch silent := time.Since(last); {
		case err != nil:
		case silent > ttl && !e.connected():
			err = fmt.Errorf("etcd did not answer for %s and the client has no connection to it", silent.Round(time.Millisecond))
		case silent > limit && silence != nil && silence():
			err = fmt.Errorf("etcd did not answer for %s", silent.Round(time.Millisecond))
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// renewAgain renews lease again after the client gave up on its stream (no answer for a TTL: for its first
// renewal, the client's dial timeout and a second), or after etcd said it expired: the client no longer renews it.
// Then it asks etcd whether the lease lives (answered: etcd said so); errLeaseExpired when it does not.
func (e *etcdStore) renewAgain(ctx context.Context, lease clientv3.LeaseID, ttl time.Duration, log *zap.Logger) (<-chan *clientv3.LeaseKeepAliveResponse, bool, error) {
	ka, err := e.cli.KeepAlive(ctx, lease)
	if err != nil {
		return nil, false, err
	}
	left, err := e.timeToLive(ctx, lease, e.cfg.Heartbeat)
	switch {
	case err != nil:
		return ka, false, nil // no answer yet: the keeper's silence bounds say when that is too long
	case left <= 0:
		return nil, true, fmt.Errorf("%w (TTL %s)", errLeaseExpired, ttl)
	}
	log.Info("etcd slow: a lease renewal went unanswered for its TTL; the lease lives, renewing again", zap.Int64("lease", int64(lease)),
		zap.Int64("ttl_left", left))
	return ka, true, nil
}

// connected reports whether the client holds a connection to etcd (ready to carry requests).
func (e *etcdStore) connected() bool {
	return e.cli.ActiveConnection().GetState() == connectivity.Ready
}

// timeToLive is the lease's time to live in seconds as etcd says it (0 or less: gone), waiting for an answer at
// most wait (an election's "no leader" is retried meanwhile).
func (e *etcdStore) timeToLive(ctx context.Context, lease clientv3.LeaseID, wait time.Duration) (int64, error) {
	tctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var ttl *clientv3.LeaseTimeToLiveResponse
	err := e.retry(tctx, "read the lease's time to live", func(ctx context.Context) (err error) {
		ttl, err = e.cli.TimeToLive(ctx, lease)
		return err
	})
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return ttl.TTL, nil
}
