package etcd

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"tpurun/rendezvous/internal/agree"

	clientv3 "go.etcd.io/etcd/client/v3"

	"tpurun/rendezvous"
)

// claimKeys are the keys m claims in the generation at dir: its host name, its requested rank.
func claimKeys(dir string, m rendezvous.Member) []string {
	var claims []string
	if m.Host != "" {
		claims = append(claims, dir+"hosts/"+m.Host)
	}
	if m.Rank >= 0 {
		claims = append(claims, dir+"ranks/"+strconv.Itoa(m.Rank))
	}
	return claims
}

// claim takes this node's host name and requested rank in the generation at dir by transactions (create, or find
// its own instance there), on its lease: another live instance holding one is ErrDuplicateNode naming both.
func (e *etcdStore) claim(ctx context.Context, dir string, m rendezvous.Member, lease clientv3.LeaseID) error {
	opt := clientv3.WithLease(lease)
	for _, k := range claimKeys(dir, m) {
		resp, err := e.txn(ctx, "claim "+k, func(t clientv3.Txn) clientv3.Txn {
			return t.If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).Then(clientv3.OpPut(k, m.Instance, opt)).Else(clientv3.OpGet(k))
		})
		if err != nil {
			return e.unreachable("claim "+k, err)
		}
		if resp.Succeeded {
			continue
		}
		other := string(resp.Responses[0].GetResponseRange().Kvs[0].Value)
		if other == m.Instance {
			if err := e.put(ctx, k, m.Instance, opt); err != nil {
				return e.unreachable("claim "+k, err)
			}
			continue
		}
		ref := rendezvous.NodeRef{Rank: -1, Instance: other}
		if g, err := e.get(ctx, dir+"members/"+other); err == nil && len(g.Kvs) == 1 {
			var om rendezvous.Member
			if json.Unmarshal(g.Kvs[0].Value, &om) == nil {
				ref = om.Ref(om.Rank)
			}
		}
		what := "host"
		if strings.Contains(k, "/ranks/") {
			what = "node rank"
		}
		return agree.NewError(rendezvous.ErrDuplicateNode, fmt.Sprintf("generation %d: the %s is already claimed by a live node (etcd key %s); each node must have its own host name and node rank", m.Generation, what, k),
			m.Ref(m.Rank), ref)
	}
	return nil
}
