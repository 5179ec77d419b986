package rendezvous

import (
	"context"
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.uber.org/zap"
)

// etcd elects a new leader when its leader stops or is cut off (a member restarted, a rolling upgrade, a loaded
// host missing its heartbeats): for about an election timeout its members answer "no leader", or a request times
// out waiting for one. A rendezvous rides that out, as a well-behaved etcd client does, instead of failing a live
// job: a request that failed that way is sent again until it succeeds or its context ends, and a watch that the
// election cancelled is resumed from the revision it had reached.

// electionErrs are the errors of an etcd that is electing a leader or briefly unreachable.
var electionErrs = []error{rpctypes.ErrNoLeader, rpctypes.ErrLeaderChanged, rpctypes.ErrTimeout,
	rpctypes.ErrTimeoutDueToLeaderFail, rpctypes.ErrTimeoutDueToConnectionLost, rpctypes.ErrTimeoutWaitAppliedIndex,
	rpctypes.ErrTooManyRequests}

// transient reports whether err is an etcd error that a retry can get past (see electionErrs).
func transient(err error) bool {
	for _, t := range electionErrs {
		if errors.Is(err, t) {
			return true
		}
	}
	return false
}

// retry runs op until it succeeds, fails with an error that is not transient, or ctx ends; it returns op's last
// error. Every op it runs is idempotent (a put, a create-if-absent transaction, a read) or harmless to repeat (a
// lease grant: an unused lease expires).
func (e *etcdBackend) retry(ctx context.Context, what string, op func(context.Context) error) error {
	pause := 50 * time.Millisecond
	for {
		err := op(ctx)
		if err == nil || !transient(err) || ctx.Err() != nil {
			return err
		}
		e.log.Info("etcd has no leader for the moment; retrying", zap.String("op", what), zap.Error(err))
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		pause = min(pause*2, time.Second)
	}
}
