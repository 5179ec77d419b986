package etcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"tpurun/rendezvous"
)

// watchAll opens the session's watch of all/, and returns once etcd confirmed it: the registration that follows
// (register) reads what it would have told before it opened. The session's link to etcd ends when a watch fails,
// or the job's lease. jctx bounds the wait.
func (s *etcdSession) watchAll(ctx, jctx context.Context) error {
	wctx, wcancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(s.job.h.ctx, func() { s.lose(s.job.h.failed()) })
	// a watch opens only once etcd answers: it must also end when etcd is found lost meanwhile
	vctx, vcancel := s.h.bind(wctx)
	s.wctx = vctx
	s.cancel = func() { stop(); vcancel(); wcancel() }
	bctx, bcancel := s.h.bind(jctx)
	defer bcancel()
	return s.open(vctx, bctx, etcdWatch{what: "the generation's news", key: s.dir + "all/", apply: s.news, opts: []clientv3.OpOption{clientv3.WithPrefix()}})
}

// apply folds a key read with the registration into the local copy; with s.mu held.
func (s *etcdSession) apply(ev *clientv3.Event) {
	if string(ev.Kv.Key) == s.job.closedKey() {
		s.jobState(ev)
	} else {
		s.news(ev)
	}
}

// jobState records the job's closed record (the job's, or its copy in this generation). With s.mu held.
func (s *etcdSession) jobState(ev *clientv3.Event) {
	if ev.Type == clientv3.EventTypePut && s.closed == nil {
		s.closed = s.job.closedErr(ev.Kv.Value)
	}
}

// news records a key of all/: the world, a completed barrier or gather, a failure. With s.mu held.
func (s *etcdSession) news(ev *clientv3.Event) {
	if ev.Type != clientv3.EventTypePut {
		return
	}
	rel := strings.TrimPrefix(string(ev.Kv.Key), s.dir+"all/")
	kind, name, _ := strings.Cut(rel, "/")
	switch kind {
	case "world":
		if s.world == nil && s.asg == nil && s.worldErr == nil {
			s.world = ev.Kv.Value // read and settled by the join, not here: a world of thousands of nodes takes a while
		}
	case "done":
		s.done[name] = true
	case "closed":
		s.jobState(ev)
	case "failures":
		s.failed(string(ev.Kv.Key), ev.Kv.Value)
	}
}

// failed passes another node's failure on. With s.mu held.
func (s *etcdSession) failed(key string, val []byte) {
	var f rendezvous.Failure
	if err := json.Unmarshal(val, &f); err != nil {
		s.log.Warn("ignoring a malformed etcd failure", zap.String("key", key), zap.Error(err))
		return
	}
	if f.Node.Instance != s.self.Instance {
		s.push(f)
	}
}

// etcdWatch is one watch of a session: what it watches (for messages), its key and options, and what folds its
// events into the session (with s.mu held).
type etcdWatch struct {
	what  string
	key   string
	apply func(*clientv3.Event)
	opts  []clientv3.OpOption
	// compacted, when set, is called when etcd compacted the history the watch was to replay (a watch opened
	// from a past revision, on an etcd that compacts often): it reads what the watch missed and returns the
	// revision to go on from, or 0 to end the watch.
	compacted func(context.Context) (int64, error)
}

// open opens w from etcd's current revision, and returns once etcd confirmed it (ctx: the watch's life; jctx
// bounds the wait). A watch that an election cancels before it is confirmed is opened again.
func (s *etcdSession) open(ctx, jctx context.Context, w etcdWatch) error {
	for {
		wctx, cancel := context.WithCancel(ctx)
		wch := s.e.cli.Watch(clientv3.WithRequireLeader(wctx), w.key, append(w.opts, clientv3.WithCreatedNotify())...)
		var resp clientv3.WatchResponse
		ok := false
		select {
		case resp, ok = <-wch:
		case <-jctx.Done():
		}
		err := resp.Err()
		switch {
		case ok && err == nil && resp.Created:
			rev := resp.Header.Revision + 1
			s.wg.Go(func() { defer cancel(); s.watch(wctx, wch, rev, w) })
			return nil
		case ok && transient(err) && jctx.Err() == nil:
			cancel()
			s.log.Info("etcd watch cancelled for a leader election; opening it again", zap.String("watch", w.what), zap.Error(err))
			continue
		}
		cancel()
		if err == nil {
			err = jctx.Err()
		}
		if err == nil {
			err = errors.New("the watch ended")
		}
		return s.opErr("watch "+w.what, err)
	}
}

// follow watches w from revision rev (ctx: its life) until the returned function stops it.
func (s *etcdSession) follow(ctx context.Context, w etcdWatch, rev int64) context.CancelFunc {
	wctx, cancel := context.WithCancel(ctx)
	wch := s.e.cli.Watch(clientv3.WithRequireLeader(wctx), w.key, append(w.opts, clientv3.WithRev(rev))...)
	s.wg.Go(func() { s.watch(wctx, wch, rev, w) })
	return cancel
}

// watch folds the events of wch (w, from revision rev on) into the session. A watch that etcd cancels because its
// member has no leader for the moment (WithRequireLeader) is resumed after the last revision applied; one whose
// history etcd compacted goes on as w.compacted says; any other end while ctx lives (a compaction w has no answer
// to, a broken stream) means etcd is lost.
func (s *etcdSession) watch(ctx context.Context, wch clientv3.WatchChan, rev int64, w etcdWatch) {
	for {
		next, err := s.drain(wch, rev, w.apply)
		if ctx.Err() != nil {
			return
		}
		switch {
		case errors.Is(err, rpctypes.ErrCompacted) && w.compacted != nil:
			s.log.Info("etcd compacted what a watch had to replay; reading it", zap.String("watch", w.what), zap.Int64("revision", next))
			if next, err = w.compacted(ctx); ctx.Err() != nil || (next == 0 && err == nil) {
				return
			}
			if err != nil {
				s.lose(s.e.lost(fmt.Sprintf("the watch of %s: %v", w.what, err)))
				return
			}
		case err == nil || !transient(err):
			if err == nil {
				err = errors.New("the watch ended")
			}
			s.lose(s.e.lost(fmt.Sprintf("the watch of %s failed: %v", w.what, err)))
			return
		default:
			s.log.Info("etcd watch cancelled for a leader election; resuming", zap.String("watch", w.what), zap.Int64("revision", next), zap.Error(err))
		}
		rev = next
		wch = s.e.cli.Watch(clientv3.WithRequireLeader(ctx), w.key, append(w.opts, clientv3.WithRev(rev))...)
	}
}

// drain applies the watch's events from revision rev until the watch ends; it returns the revision to resume
// from and why it ended (nil: the watch channel closed).
func (s *etcdSession) drain(wch clientv3.WatchChan, rev int64, apply func(*clientv3.Event)) (int64, error) {
	for resp := range wch {
		if err := resp.Err(); err != nil {
			return rev, err
		}
		if len(resp.Events) == 0 {
			continue
		}
		s.mu.Lock()
		for _, ev := range resp.Events {
			apply(ev)
			rev = max(rev, ev.Kv.ModRevision+1)
		}
		s.notify()
		s.mu.Unlock()
	}
	return rev, nil
}
