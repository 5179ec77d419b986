package etcd

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"tpurun/rendezvous"
	"tpurun/rendezvous/internal/agree"
	"tpurun/rendezvous/internal/progress"
)

// A node waiting on etcd for its world says so every progress interval (the option progress_interval): the node
// counting the registrations names who has arrived and who is missing (it holds them); every other node reads
// how many have registered (a count, not the registrations: one small read per node per interval, and only
// while a world is late). Each says how long its join will still wait.

// maxNamed bounds how many nodes a progress line names.
const maxNamed = 16

// progress logs the join's progress every interval until stop; ctx is the join's (its deadline bounds it).
func (s *etcdSession) progress(ctx context.Context) (stop func()) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(s.e.cfg.Timeout)
	}
	return progress.Every(progress.Interval(s.e.cfg.Conf), func() {
		wait := fmt.Sprintf("the join times out in %s", progress.Left(deadline))
		if line := s.countedLine(); line != "" {
			s.log.Info(line + "; " + wait)
			return
		}
		rctx, cancel := context.WithTimeout(ctx, s.e.cfg.Heartbeat)
		defer cancel()
		r, err := s.e.cli.Get(rctx, s.dir+"members/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			s.log.Info(fmt.Sprintf("rendezvous: generation %d waits for nodes on etcd at %s (no count of them: %v); %s", s.self.Generation, s.e.cfg.Endpoint, err, wait))
			return
		}
		s.log.Info(fmt.Sprintf("rendezvous: generation %d waits for nodes: %d of %s registered on etcd at %s (the node counting them names who is missing); %s",
			s.self.Generation, r.Count, agree.SizeRange(s.min, s.max), s.e.cfg.Endpoint, wait))
	})
}

// countedLine says who has arrived and who is missing, on the node that counts the registrations; "" on another.
func (s *etcdSession) countedLine() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tally == nil || s.asg != nil {
		return ""
	}
	arrived := s.tally.first(len(s.tally.live))
	names := make([]string, len(arrived))
	for i, m := range arrived {
		names[i] = m.Ref(m.Rank).String()
	}
	var missing []string
	var re *rendezvous.Error
	if errors.As(agree.Missing(s.self.Generation, s.min, s.max, arrived, nil, 0), &re) {
		for _, n := range re.Nodes {
			missing = append(missing, n.String())
		}
	}
	return fmt.Sprintf("rendezvous: generation %d waits for nodes: %d of %s arrived (%s); missing: %s", s.self.Generation, len(arrived),
		agree.SizeRange(s.min, s.max), progress.List(names, maxNamed), progress.List(missing, maxNamed))
}
