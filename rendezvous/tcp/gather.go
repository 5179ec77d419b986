package tcp

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sync"
	"tpurun/rendezvous/internal/agree"

	"tpurun/rendezvous"
)

// gathering is the data published under one key: done is closed when every node has published, or a node that
// has not is gone (err). The gathered reply is encoded once, for every node (enc).
type gathering struct {
	data map[int][]byte
	done chan struct{}
	over bool
	err  error
	enc  *encoded
}

// encoded is a message part encoded once, by the first who needs it.
type encoded struct {
	once sync.Once
	b    []byte
	err  error
}

func (g *gathering) end(err error) {
	if !g.over {
		g.over, g.err = true, err
		close(g.done)
	}
}

// gatheringFor is key's gathering, made at its first publication or gather: failed at once when a node that has
// not published is gone. With s.mu held.
func (w *world) gatheringFor(key string) *gathering {
	g := w.data[key]
	if g == nil {
		g = &gathering{data: map[int][]byte{}, done: make(chan struct{}), enc: &encoded{}}
		w.data[key] = g
		for _, r := range w.gone {
			g.end(w.lostErr(r, fmt.Sprintf("gather %q cannot complete: it is gone without publishing", key)))
			break
		}
	}
	return g
}

// publish stores rank's data under key. A publication after the gathering completed replaces the data for later
// gathers (the map the earlier ones read is left as it was). With s.mu held.
func (w *world) publish(key string, rank int, data []byte) {
	g := w.gatheringFor(key)
	if g.over {
		g.data, g.enc = maps.Clone(g.data), &encoded{}
	}
	g.data[rank] = data
	if len(g.data) == len(w.byRank) {
		g.end(nil)
	}
}

func (s *Server) gather(c *sconn, w *world, m *message) {
	s.mu.Lock()
	g := w.gatheringFor(m.Name)
	s.mu.Unlock()
	ok, err := s.wait(c, g.done, s.timeout(m))
	if errors.Is(err, rendezvous.ErrClosed) {
		return
	}
	s.mu.Lock()
	if !ok && !g.over {
		var late []rendezvous.NodeRef
		for r, e := range w.byRank {
			if _, ok := g.data[r]; !ok {
				late = append(late, e.m.Ref(r))
			}
		}
		s.mu.Unlock()
		s.reply(c, m.ID, nil, agree.NewError(rendezvous.ErrTimeout, fmt.Sprintf("gather %q: these nodes did not publish in time", m.Name), late...))
		return
	}
	data, enc, gerr := g.data, g.enc, g.err
	s.mu.Unlock()
	if gerr != nil {
		s.reply(c, m.ID, nil, gerr)
		return
	}
	enc.once.Do(func() { enc.b, enc.err = json.Marshal(data) })
	if enc.err != nil {
		s.reply(c, m.ID, nil, fmt.Errorf("rendezvous: encode gather %q: %w", m.Name, enc.err))
		return
	}
	s.sendReply(c, m.ID, "gathered", enc.b)
}
