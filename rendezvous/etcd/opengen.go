package etcd

import (
	"context"
	"encoding/json"
	"fmt"
	"tpurun/rendezvous/internal/agree"

	clientv3 "go.etcd.io/etcd/client/v3"

	"tpurun/rendezvous"
)

func padGen(g int) string { return fmt.Sprintf("%010d", g) }

// openGen opens generation m.Generation of job j, or finds it open, and returns what it was opened with: the size
// range its first node asked for. Opening a generation also raises the job's latest generation, which
// LatestGeneration joiners read. Both keys live on the job's lease. All in one transaction that holds only while
// the instance is open: a closed one is its *JobClosedError, a vanished one errJobGone. Every node but the first
// finds the generation open with a read (one transaction that writes nothing: no entry in etcd's log).
func (e *etcdStore) openGen(ctx context.Context, j *etcdJob, m rendezvous.Member) (etcdOpen, error) {
	g := m.Generation
	open, lk, closed := j.genDir(g)+"open", j.latestKey(), j.closedKey()
	r, err := e.txn(ctx, "read the generation", func(t clientv3.Txn) clientv3.Txn {
		return t.If(clientv3.Compare(clientv3.CreateRevision(j.key), "=", j.rev), clientv3.Compare(clientv3.CreateRevision(closed), "=", 0),
			clientv3.Compare(clientv3.CreateRevision(open), ">", 0), clientv3.Compare(clientv3.Value(lk), ">", padGen(g-1))).
			Then(clientv3.OpGet(open))
	})
	if err != nil {
		return etcdOpen{}, e.unreachable("read the generation", err)
	}
	if r.Succeeded {
		return parseOpen(open, r.Responses[0].GetResponseRange().Kvs[0].Value)
	}
	return e.openGenWrite(ctx, j, m)
}

// parseOpen reads the value of a generation's open key.
func parseOpen(key string, val []byte) (etcdOpen, error) {
	var got etcdOpen
	if err := json.Unmarshal(val, &got); err != nil || got.NNodes < 1 {
		return etcdOpen{}, agree.NewError(rendezvous.ErrProtocol, fmt.Sprintf("etcd key %s holds %q, not how the generation was opened", key, val))
	}
	return got, nil
}

// openGenWrite is openGen's transaction that writes: it opens the generation (see openGen).
func (e *etcdStore) openGenWrite(ctx context.Context, j *etcdJob, m rendezvous.Member) (etcdOpen, error) {
	g := m.Generation
	open, lk, gv, closed := j.genDir(g)+"open", j.latestKey(), padGen(g), j.closedKey()
	mine := etcdOpen{NNodes: e.cfg.NNodes, MinNodes: e.cfg.MinNodes, By: m.Ref(m.Rank)}
	b, _ := json.Marshal(mine)
	jl := clientv3.WithLease(j.lease)
	bump := clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(lk), "=", 0)}, []clientv3.Op{clientv3.OpPut(lk, gv, jl)},
		[]clientv3.Op{clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.Value(lk), "<", gv)}, []clientv3.Op{clientv3.OpPut(lk, gv, jl)}, nil)})
	opening := clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(open), "=", 0)},
		[]clientv3.Op{clientv3.OpPut(open, string(b), jl), bump}, []clientv3.Op{clientv3.OpGet(open), bump})
	r, err := e.txn(ctx, "open generation", func(t clientv3.Txn) clientv3.Txn {
		return t.If(clientv3.Compare(clientv3.CreateRevision(j.key), "=", j.rev), clientv3.Compare(clientv3.CreateRevision(closed), "=", 0)).
			Then(opening).Else(clientv3.OpGet(closed))
	})
	if err != nil {
		return etcdOpen{}, e.unreachable("open generation", err)
	}
	if !r.Succeeded {
		if kvs := r.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
			return etcdOpen{}, j.closedErr(kvs[0].Value)
		}
		return etcdOpen{}, errJobGone
	}
	o := r.Responses[0].GetResponseTxn()
	if o.Succeeded {
		return mine, nil
	}
	return parseOpen(open, o.Responses[0].GetResponseRange().Kvs[0].Value)
}
