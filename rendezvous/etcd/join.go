package etcd

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"tpurun/rendezvous/internal/agree"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"tpurun/rendezvous"
)

// Join enters m.Generation of the job open under m.RunID (a new one when none is), or with LatestGeneration the
// generation being formed: when the world closes without this node (it came too late), it goes on to the next
// one. A closed job is a *JobClosedError.
func (e *etcdStore) Join(ctx context.Context, m rendezvous.Member, log *zap.Logger) (rendezvous.Session, error) {
	jctx, cancel := context.WithTimeout(ctx, e.cfg.Timeout)
	defer cancel()
	for {
		j, err := e.enterJob(jctx, m.RunID)
		if err != nil {
			return nil, err
		}
		s, err := e.joinJob(ctx, jctx, j, m, log.With(zap.String("job", j.id)))
		switch {
		case errors.Is(err, errJobGone) && jctx.Err() == nil:
			log.Info("rendezvous: the job found had just ended (its last node let go); entering the one open now")
			e.leaveJob(j)
			continue
		case errors.Is(err, rendezvous.ErrJobClosed):
			e.leaveJob(j) // this node does not keep a closed job alive
		}
		return s, err
	}
}

// errJobGone: the job instance this node entered vanished before it opened a generation (its last node had let
// go just before): the node enters the instance open now.
var errJobGone = errors.New("rendezvous: the job instance vanished")

// joinJob enters m.Generation of job j (see join).
func (e *etcdStore) joinJob(ctx, jctx context.Context, j *etcdJob, m rendezvous.Member, log *zap.Logger) (rendezvous.Session, error) {
	latest := m.Generation == rendezvous.LatestGeneration
	for {
		if latest {
			g, err := e.openGeneration(jctx, j, m, log)
			if err != nil {
				return nil, err
			}
			m.Generation = g
		}
		s, err := e.joinGeneration(ctx, jctx, j, m, log)
		if latest && errors.Is(err, rendezvous.ErrWorldFull) && jctx.Err() == nil {
			log.Info("rendezvous generation closed before this node got in; joining the next", zap.Int("generation", m.Generation))
			continue
		}
		return s, err
	}
}

// openGeneration is the generation a LatestGeneration joiner enters: the latest one opened, or the next one when
// its world is already agreed (the node waits there for the world to restart). A node that asks for another size
// range than the running world's is refused at once.
func (e *etcdStore) openGeneration(ctx context.Context, j *etcdJob, m rendezvous.Member, log *zap.Logger) (int, error) {
	key := j.latestKey()
	resp, err := e.get(ctx, key)
	if err != nil {
		return 0, e.unreachable("read the latest generation", err)
	}
	g := 0
	if len(resp.Kvs) == 1 {
		if g, err = strconv.Atoi(string(resp.Kvs[0].Value)); err != nil || g < 0 {
			return 0, agree.NewError(rendezvous.ErrProtocol, fmt.Sprintf("etcd key %s holds %q, not a generation", key, resp.Kvs[0].Value))
		}
	}
	dir := j.genDir(g)
	w, err := e.get(ctx, dir+"all/world")
	if err != nil {
		return 0, e.unreachable("read the latest generation", err)
	}
	if len(w.Kvs) == 0 {
		return g, nil
	}
	world, err := parseWorld(dir, w.Kvs[0].Value)
	switch {
	case err != nil:
		return 0, err
	case world.Error != nil:
		return g, nil // the generation failed: joining it says why
	case world.NNodes != e.cfg.NNodes || world.MinNodes != e.cfg.MinNodes:
		members, ranks, err := e.readWorld(ctx, dir, world)
		if err != nil {
			return 0, err
		}
		return 0, world.sameSize(g, e.cfg, members, ranks, m.Ref(m.Rank))
	}
	log.Info("rendezvous: a node waits for the world to restart", zap.Int("running_generation", g), zap.Int("waits_in_generation", g+1))
	return g + 1, nil
}

// joinGeneration registers this node in one generation and waits for its world. The generation's opening, the
// node's lease and its watches are asked for at once; then one transaction claims its host and rank and registers
// it (a node that claims them again, or finds them taken, goes the long way: claim).
func (e *etcdStore) joinGeneration(ctx, jctx context.Context, j *etcdJob, m rendezvous.Member, log *zap.Logger) (rendezvous.Session, error) {
	s := newEtcdSession(e, j, log, j.genDir(m.Generation), m)
	s.forming.Store(true) // until the world is agreed, within the join's timeout
	defer s.forming.Store(false)
	var wg sync.WaitGroup
	var lg *clientv3.LeaseGrantResponse
	var gerr, werr error
	wg.Go(func() {
		if lg, gerr = e.grant(jctx, e.ttl); gerr == nil {
			s.keep(ctx, lg.ID) // at once: the rest of the join may take a while on a loaded etcd
		}
	})
	wg.Go(func() { werr = s.watchAll(ctx, jctx) })
	open, err := e.openGen(jctx, j, m)
	wg.Wait()
	switch {
	case err != nil:
	case gerr != nil:
		err = e.unreachable("grant a lease", gerr)
	case werr != nil:
		err = werr
	case open.NNodes != e.cfg.NNodes || open.MinNodes != e.cfg.MinNodes:
		err = e.sizeMismatch(jctx, j, m, open)
	default:
		err = s.register(jctx)
	}
	var asg *rendezvous.Assignment
	if err == nil {
		asg, err = s.await(jctx)
	}
	if err != nil {
		s.Close()
		return nil, err
	}
	log.Info("rendezvous joined (etcd)", zap.Int("node_rank", asg.NodeRank), zap.Int("nnodes", asg.NNodes), zap.Int("generation", asg.Generation))
	return s, nil
}
