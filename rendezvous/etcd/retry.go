package etcd

import (
	"context"
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
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
func (e *etcdStore) retry(ctx context.Context, what string, op func(context.Context) error) error {
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

// put writes key, riding out a leader election (retry).
func (e *etcdStore) put(ctx context.Context, key, val string, opts ...clientv3.OpOption) error {
	return e.retry(ctx, "put "+key, func(ctx context.Context) error {
		_, err := e.cli.Put(ctx, key, val, opts...)
		return err
	})
}

// get reads key, riding out a leader election (retry).
func (e *etcdStore) get(ctx context.Context, key string, opts ...clientv3.OpOption) (resp *clientv3.GetResponse, err error) {
	err = e.retry(ctx, "read "+key, func(ctx context.Context) (err error) {
		resp, err = e.cli.Get(ctx, key, opts...)
		return err
	})
	return resp, err
}

// txn commits the transaction txn builds on a fresh one, riding out a leader election (retry): every transaction
// of the package is a create-if-absent, a read, or both, so repeating it is harmless.
func (e *etcdStore) txn(ctx context.Context, what string, txn func(clientv3.Txn) clientv3.Txn) (resp *clientv3.TxnResponse, err error) {
	err = e.retry(ctx, what, func(ctx context.Context) (err error) {
		resp, err = txn(e.cli.Txn(ctx)).Commit()
		return err
	})
	return resp, err
}

// grant grants a lease of ttl seconds, riding out a leader election (retry; an unused lease expires).
func (e *etcdStore) grant(ctx context.Context, ttl int64) (resp *clientv3.LeaseGrantResponse, err error) {
	err = e.retry(ctx, "grant a lease", func(ctx context.Context) (err error) {
		resp, err = e.cli.Grant(ctx, ttl)
		return err
	})
	return resp, err
}
