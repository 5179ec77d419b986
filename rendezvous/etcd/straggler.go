package etcd

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"tpurun/rendezvous"
)

// A straggler on etcd: jobs under different run ids live under their own keys, so a node of another job (of a
// previous attempt of a restarted JobSet, or left over from an earlier run) never touches the world of the job it
// meant to meet: that world forms without it, and it waits alone for nodes that will not come. Several jobs may
// share one etcd, so an open job of another run id is no reason to refuse a node at once; when its join times
// out, its error names the jobs open under the prefix beside its own (otherJobs), so that both run ids are told.

// maxOtherJobs bounds how many other run ids a timed-out join names.
const maxOtherJobs = 8

// otherJobs adds to err (a join's ErrMissingNodes) the run ids of the jobs open under the prefix besides runID:
// a node alone in its job while another is open is likely of the wrong one.
func (e *etcdStore) otherJobs(ctx context.Context, runID string, err error) error {
	var re *rendezvous.Error
	if !errors.As(err, &re) {
		return err
	}
	r, gerr := e.get(ctx, e.prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if gerr != nil {
		return err
	}
	var ids []string
	for _, kv := range r.Kvs {
		id, ok := strings.CutSuffix(strings.TrimPrefix(string(kv.Key), e.prefix), "/job")
		if ok && id != runID && !strings.Contains(id, "/") {
			ids = append(ids, fmt.Sprintf("%q", id))
		}
	}
	if len(ids) == 0 {
		return err
	}
	sort.Strings(ids)
	more := ""
	if len(ids) > maxOtherJobs {
		more, ids = fmt.Sprintf(" and %d more", len(ids)-maxOtherJobs), ids[:maxOtherJobs]
	}
	out := *re
	out.Detail = fmt.Sprintf("%s; this node's run id is %q, while etcd has open the jobs of run id %s%s under the same prefix: if this node belongs to one of them "+
		"(a straggler of a previous attempt of a restarted JobSet has the old run id), give it that job's run id (--rdzv-id), or stop it",
		re.Detail, runID, strings.Join(ids, ", "), more)
	return &out
}
