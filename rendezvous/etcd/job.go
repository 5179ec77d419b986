package etcd

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"tpurun/rendezvous"
	"tpurun/rendezvous/internal/agree"
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
		return agree.NewError(rendezvous.ErrProtocol, fmt.Sprintf("etcd key %s holds %q, not how a job ended", j.closedKey(), val))
	}
	return &rendezvous.JobClosedError{RunID: j.runID, Generation: c.Generation, ExitCode: c.ExitCode}
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

// findJob is the instance open under runID, or a new one it opens with a lease of its own; either way it keeps
// the instance's lease alive. The open instance is read first: every node but the first finds it with one read,
// and grants no lease it does not need (a thousand nodes would leave a thousand unused leases for etcd to expire).
func (e *etcdStore) findJob(ctx context.Context, runID string) (*etcdJob, error) {
	key := e.jobKey(runID)
	r, err := e.get(ctx, key)
	if err != nil {
		return nil, e.unreachable("read the job", err)
	}
	kvs := r.Kvs
	var rec etcdJobRecord
	if len(kvs) == 0 {
		if kvs, err = e.openJob(ctx, key, &rec); err != nil {
			return nil, err
		}
	}
	created := r.Header.Revision
	if len(kvs) > 0 {
		if err := json.Unmarshal(kvs[0].Value, &rec); err != nil || rec.ID == "" {
			return nil, agree.NewError(rendezvous.ErrProtocol, fmt.Sprintf("etcd key %s holds %q, not a job", key, kvs[0].Value))
		}
		created = kvs[0].CreateRevision
	}
	j := &etcdJob{runID: runID, id: rec.ID, rev: created, lease: clientv3.LeaseID(rec.Lease), dir: fmt.Sprintf("%s%s/%s/", e.prefix, runID, rec.ID),
		key: key, h: newHealth()}
	var wg sync.WaitGroup
	unkeep := e.keep(ctx, &wg, j.lease, e.jobTTL, nil, "the job's", e.log, func(err error) {
		e.log.Warn("rendezvous store lost", zap.Error(err))
		j.h.end(err)
	})
	j.stop = func() { unkeep(); wg.Wait() }
	return j, nil
}

// openJob opens a new instance under key, unless another node did since it was read: it returns that one's record
// (none when this node opened it; rec is then its own). Two writes (a lease, a transaction): the lease is granted
// before it is known to be needed; unneeded, it holds nothing and expires.
func (e *etcdStore) openJob(ctx context.Context, key string, rec *etcdJobRecord) ([]*mvccpb.KeyValue, error) {
	lg, err := e.grant(ctx, e.jobTTL)
	if err != nil {
		return nil, e.unreachable("grant the job's lease", err)
	}
	*rec = etcdJobRecord{ID: rendezvous.NewInstance(), Lease: int64(lg.ID)}
	b, _ := json.Marshal(rec)
	t, err := e.txn(ctx, "open the job", func(t clientv3.Txn) clientv3.Txn {
		return t.If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, string(b), clientv3.WithLease(lg.ID))).Else(clientv3.OpGet(key))
	})
	if err != nil {
		return nil, e.unreachable("open the job", err)
	}
	if t.Succeeded {
		e.log.Info("rendezvous: a new job opened", zap.String("job", rec.ID))
		return []*mvccpb.KeyValue{{Key: []byte(key), Value: b, CreateRevision: t.Header.Revision}}, nil
	}
	return t.Responses[0].GetResponseRange().Kvs, nil // the transaction's read: the key exists
}
