package rendezvous

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// etcdJob is one instance of the job under a run id on etcd, as this node takes part in it: the instance's key
// prefix, and the job's lease, which every node keeps alive from its first join until it closes its Rendezvous.
// Every key of the instance that is not tied to a node's own lease is tied to the job's: when the job's last node
// lets go (or dies), the whole instance, its closed record included, vanishes jobTTL later, and the run id is
// free for a new job that starts at generation 0.
type etcdJob struct {
	runID string
	id    string // the instance, random
	key   string // <prefix><run id>/job, which names the open instance
	rev   int64  // the key's create revision: the instance is open while the key is that one
	lease clientv3.LeaseID
	dir   string // <prefix><run id>/<id>/
	h     *health
	stop  func() // stops keeping the lease alive
}

// etcdJobRecord is the value of <prefix><run id>/job: the open instance and its lease.
type etcdJobRecord struct {
	ID    string `json:"id"`
	Lease int64  `json:"lease"`
}

// etcdClosed is the value of <prefix><run id>/<job>/closed: how the job ended.
type etcdClosed struct {
	Generation int `json:"generation"`
	ExitCode   int `json:"exit_code"`
}

func (e *etcdStore) jobKey(runID string) string { return e.prefix + runID + "/job" }

// genDir is the key prefix of one generation of the job.
func (j *etcdJob) genDir(g int) string { return fmt.Sprintf("%s%d/", j.dir, g) }

// latestKey holds the highest generation opened, zero-padded (padGen) so that etcd's byte-wise comparison orders
// generations.
func (j *etcdJob) latestKey() string { return j.dir + "latest" }

// closedKey is written once, when the job closes (Session.Finish).
func (j *etcdJob) closedKey() string { return j.dir + "closed" }

// closedErr reads a closed record.
func (j *etcdJob) closedErr(val []byte) error {
	var c etcdClosed
	if err := json.Unmarshal(val, &c); err != nil {
		return newError(ErrProtocol, fmt.Sprintf("etcd key %s holds %q, not how a job ended", j.closedKey(), val))
	}
	return &JobClosedError{RunID: j.runID, Generation: c.Generation, ExitCode: c.ExitCode}
}

// enterJob is the job this node takes part in under runID: the one it already entered, else the instance open
// under runID, else a new one it opens. Whether the instance is closed is read when a generation is opened
// (openGen): with the instance's record, in one transaction.
func (e *etcdStore) enterJob(ctx context.Context, runID string) (*etcdJob, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if j := e.jobs[runID]; j != nil {
		if err := j.h.failed(); err != nil {
			return nil, err
		}
		return j, nil
	}
	j, err := e.findJob(ctx, runID)
	if err != nil {
		return nil, err
	}
	e.jobs[runID] = j
	return j, nil
}

// leaveJob forgets j (its instance vanished: the next join enters the one open then).
func (e *etcdStore) leaveJob(j *etcdJob) {
	e.mu.Lock()
	if e.jobs[j.runID] == j {
		delete(e.jobs, j.runID)
	}
	e.mu.Unlock()
	j.stop()
}

// findJob opens a new instance under runID, with a lease of its own, unless one is open: then that one. Either
// way it keeps the instance's lease alive. Two writes (no linearizable read, which a fresh etcd can be slow to
// serve): the lease is granted before it is known to be needed; unneeded, it holds nothing and expires.
func (e *etcdStore) findJob(ctx context.Context, runID string) (*etcdJob, error) {
	key := e.jobKey(runID)
	lg, err := e.grant(ctx, e.jobTTL)
	if err != nil {
		return nil, e.unreachable("grant the job's lease", err)
	}
	rec := etcdJobRecord{ID: NewInstance(), Lease: int64(lg.ID)}
	b, _ := json.Marshal(rec)
	t, err := e.txn(ctx, "open the job", func(t clientv3.Txn) clientv3.Txn {
		return t.If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, string(b), clientv3.WithLease(lg.ID))).Else(clientv3.OpGet(key))
	})
	if err != nil {
		return nil, e.unreachable("open the job", err)
	}
	created := t.Header.Revision
	if t.Succeeded {
		e.log.Info("rendezvous: a new job opened", zap.String("job", rec.ID))
	} else {
		kv := t.Responses[0].GetResponseRange().Kvs[0] // the transaction's read: the key exists
		if err := json.Unmarshal(kv.Value, &rec); err != nil || rec.ID == "" {
			return nil, newError(ErrProtocol, fmt.Sprintf("etcd key %s holds %q, not a job", key, kv.Value))
		}
		created = kv.CreateRevision
	}
	j := &etcdJob{runID: runID, id: rec.ID, rev: created, lease: clientv3.LeaseID(rec.Lease), dir: fmt.Sprintf("%s%s/%s/", e.prefix, runID, rec.ID),
		key: key, h: newHealth()}
	kctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	ka, err := e.cli.KeepAlive(kctx, j.lease)
	if err != nil {
		cancel()
		return nil, e.unreachable("keep the job's lease alive", err)
	}
	var wg sync.WaitGroup
	j.stop = func() { cancel(); wg.Wait() }
	wg.Go(func() {
		if !e.keepAlive(kctx, j.lease, ka, e.log) && kctx.Err() == nil {
			err := e.lost(fmt.Sprintf("the job's lease %x expired or could not be kept alive", rec.Lease))
			e.log.Warn("rendezvous store lost", zap.Error(err))
			j.h.end(err)
		}
	})
	return j, nil
}
