package etcd

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"tpurun/rendezvous/internal/agree"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"tpurun/internal/failure"
	"tpurun/rendezvous"
)

// How a generation's world is agreed on etcd without every node hearing every other (rendezvous's doc): each node
// registers (members/<instance>), and only the node holding the first registration key counts them: it watches
// members/, while each of the others watches one key, the first one it knows of, to take over if it vanishes.
// When enough nodes are in, the counting node assigns the ranks, checks that the nodes agree, and writes the
// outcome once: the world under world/<its instance>/, each node's share apart (putWorld), and its head in
// all/world, which every node watches; or the error every node gets. A thousand nodes then cost etcd a thousand
// registrations, one world and a thousand reads of a share, where every node watching every registration cost a
// million events, and every node reading the whole world a million registrations served.

// etcdRegistration is the value of members/<instance>: the member and the world size it asks for; Left once the
// node left the world (Session.Leave), its key then tied to the job's lease.
type etcdRegistration struct {
	rendezvous.Member
	NNodes   int  `json:"nnodes"`
	MinNodes int  `json:"min_nodes"`
	Left     bool `json:"left,omitempty"`
}

// etcdOpen is the value of a generation's "open" key: the size range its first node asked for, and that node.
// A node that asks for another one fails the generation (sizeMismatch).
type etcdOpen struct {
	NNodes   int                `json:"nnodes"`
	MinNodes int                `json:"min_nodes"`
	By       rendezvous.NodeRef `json:"by"`
}

// etcdWorld is the head of all/world's value: the agreed world of Nodes nodes and the size range it was agreed
// under; or why the generation has no world (Error: its nodes ask for different size ranges, or disagree on a
// setting). Rev is the revision the proposer had seen when it chose the nodes: a node of the world whose
// registration vanished after it is lost. The world itself is under world/<By>/ (readShare): each node reads its
// share there, not the whole world. Fixed: every node's share names its slice's nodes (a slice table per slice).
type etcdWorld struct {
	NNodes   int              `json:"nnodes,omitempty"`
	MinNodes int              `json:"min_nodes,omitempty"`
	Nodes    int              `json:"nodes,omitempty"`
	Chunks   int              `json:"chunks,omitempty"`
	By       string           `json:"by,omitempty"`
	Fixed    bool             `json:"fixed,omitempty"`
	Rev      int64            `json:"rev,omitempty"`
	Error    *agree.WireError `json:"error,omitempty"`
}

// worldChunk bounds one chunk of the world's registrations: etcd refuses a request above 1.5 MiB by default. A
// variable for the tests of a world in chunks.
var worldChunk = 1 << 20

// The world's registrations are encoded by column, not by member: each field of Member once when every member
// has the same value (the run id, the accelerator type, the workers per node, ...), else once for all members: a
// text field as one string, its values one a line (unless one holds a line break: then as the others), any other
// as a JSON array. A thousand members decode about twenty times faster so than as a thousand JSON objects, and
// every node of the world decodes them: a thousand nodes simulated in one process spent most of their join
// doing it. The fields are Member's, found by reflection: a field added to Member travels without a change here.

// worldColumns is one chunk of the world's registrations by column: N members; Same holds the fields every one
// of them has alike, Lines the text fields as their values one a line, Cols the others (an array of N values
// each). Keys are Member's JSON field names.
type worldColumns struct {
	N     int                        `json:"n"`
	Same  map[string]json.RawMessage `json:"same,omitempty"`
	Lines map[string]string          `json:"lines,omitempty"`
	Cols  map[string]json.RawMessage `json:"cols,omitempty"`
}

// memberField is one field of Member: its index and JSON name.
type memberField struct {
	index int
	name  string
}

// memberFields are Member's fields that JSON encodes.
var memberFields = sync.OnceValue(func() []memberField {
	var out []memberField
	t := reflect.TypeFor[rendezvous.Member]()
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, memberField{index: i, name: name})
	}
	return out
})

// encodeColumns encodes members by column.
func encodeColumns(members []rendezvous.Member) []byte {
	c := worldColumns{N: len(members), Same: map[string]json.RawMessage{}, Lines: map[string]string{}, Cols: map[string]json.RawMessage{}}
	vs := reflect.ValueOf(members)
	for _, f := range memberFields() {
		first := vs.Index(0).Field(f.index)
		col := reflect.MakeSlice(reflect.SliceOf(first.Type()), len(members), len(members))
		same, lines := true, first.Kind() == reflect.String
		for i := range members {
			v := vs.Index(i).Field(f.index)
			same = same && reflect.DeepEqual(v.Interface(), first.Interface())
			lines = lines && !strings.Contains(v.String(), "\n")
			col.Index(i).Set(v)
		}
		switch {
		case same:
			c.Same[f.name], _ = json.Marshal(first.Interface())
		case lines:
			c.Lines[f.name] = strings.Join(col.Interface().([]string), "\n")
		default:
			c.Cols[f.name], _ = json.Marshal(col.Interface())
		}
	}
	b, _ := json.Marshal(c)
	return b
}

// decodeColumns decodes members encoded by column. A field this version does not know is ignored; one it knows
// and the encoding lacks stays zero. A map or slice every member has alike is shared between them: the members
// are read, not changed.
func decodeColumns(b []byte) ([]rendezvous.Member, error) {
	var c worldColumns
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, err
	}
	if c.N < 1 || c.N > rendezvous.MaxNodes {
		return nil, fmt.Errorf("%d members", c.N)
	}
	tmpl, err := c.alike()
	if err != nil {
		return nil, err
	}
	tv := reflect.ValueOf(tmpl)
	members := make([]rendezvous.Member, c.N)
	for i := range members {
		members[i] = tmpl
	}
	vs := reflect.ValueOf(members)
	for _, f := range memberFields() {
		if text, ok := c.Lines[f.name]; ok && tv.Field(f.index).Kind() == reflect.String {
			vals := strings.Split(text, "\n")
			if len(vals) != c.N {
				return nil, fmt.Errorf("field %s: %d values for %d members", f.name, len(vals), c.N)
			}
			for i, v := range vals {
				vs.Index(i).Field(f.index).SetString(v)
			}
			continue
		}
		raw, ok := c.Cols[f.name]
		if !ok {
			continue
		}
		col := reflect.New(reflect.SliceOf(tv.Field(f.index).Type()))
		if err := json.Unmarshal(raw, col.Interface()); err != nil {
			return nil, fmt.Errorf("field %s: %w", f.name, err)
		}
		if col.Elem().Len() != c.N {
			return nil, fmt.Errorf("field %s: %d values for %d members", f.name, col.Elem().Len(), c.N)
		}
		for i := range members {
			vs.Index(i).Field(f.index).Set(col.Elem().Index(i))
		}
	}
	return members, nil
}

// alike is the member with the fields every member has alike (c.Same), the others zero.
func (c *worldColumns) alike() (rendezvous.Member, error) {
	var tmpl rendezvous.Member
	tv := reflect.ValueOf(&tmpl).Elem()
	for _, f := range memberFields() {
		if raw, ok := c.Same[f.name]; ok {
			if err := json.Unmarshal(raw, tv.Field(f.index).Addr().Interface()); err != nil {
				return rendezvous.Member{}, fmt.Errorf("field %s: %w", f.name, err)
			}
		}
	}
	return tmpl, nil
}

// chunks encodes members by column in parts of at most about limit bytes each (a part of one member at least;
// the size of a part is estimated from the whole).
func chunks(members []rendezvous.Member, limit int) [][]byte {
	whole := encodeColumns(members)
	if len(whole) <= limit {
		return [][]byte{whole}
	}
	for parts := (len(whole) + limit - 1) / limit; ; parts *= 2 {
		per := (len(members) + parts - 1) / parts
		var out [][]byte
		fits := true
		for i := 0; i < len(members); i += per {
			c := encodeColumns(members[i:min(i+per, len(members))])
			fits = fits && (len(c) <= limit || per == 1)
			out = append(out, c)
		}
		if fits {
			return out
		}
	}
}

// sameSize is nil when cfg asks for the size range w was agreed under, else the *MismatchError naming both and
// who gave them (members: w's, with their ranks).
func (w *etcdWorld) sameSize(g int, cfg *rendezvous.Config, members []rendezvous.Member, ranks []int, self rendezvous.NodeRef) error {
	if w.NNodes == cfg.NNodes && w.MinNodes == cfg.MinNodes {
		return nil
	}
	vals := make([]string, 0, len(members)+1)
	refs := make([]rendezvous.NodeRef, 0, len(members)+1)
	for i, m := range members {
		vals, refs = append(vals, agree.SizeRange(w.MinNodes, w.NNodes)), append(refs, m.Ref(ranks[i]))
	}
	vals, refs = append(vals, agree.SizeRange(cfg.MinNodes, cfg.NNodes)), append(refs, self)
	return agree.Disagreement(failure.RendezvousNodes.Word(), g, vals, refs)
}

// sizeMismatch is the *MismatchError of a node that asks for another size range than the generation at dir was
// opened with: it names the node that opened it, every node registered there and this one. It is also written as
// the generation's world, so that every node waiting in it fails at once with it (unless a world was agreed
// before: then only this node is refused).
func (e *etcdStore) sizeMismatch(ctx context.Context, j *etcdJob, m rendezvous.Member, open etcdOpen) error {
	dir := j.genDir(m.Generation)
	r, err := e.get(ctx, dir+"members/", clientv3.WithPrefix())
	if err != nil {
		return e.unreachable("read the registrations", err)
	}
	kvs := slices.Clone(r.Kvs)
	byCreation(kvs)
	vals := []string{agree.SizeRange(open.MinNodes, open.NNodes)}
	refs := []rendezvous.NodeRef{open.By}
	for _, kv := range kvs {
		var reg etcdRegistration
		if json.Unmarshal(kv.Value, &reg) != nil || reg.Instance == open.By.Instance {
			continue
		}
		vals, refs = append(vals, agree.SizeRange(reg.MinNodes, reg.NNodes)), append(refs, reg.Ref(reg.Rank))
	}
	vals, refs = append(vals, agree.SizeRange(e.cfg.MinNodes, e.cfg.NNodes)), append(refs, m.Ref(m.Rank))
	merr := agree.Disagreement(failure.RendezvousNodes.Word(), m.Generation, vals, refs)
	b, _ := json.Marshal(etcdWorld{Error: agree.ToWire(merr)}) // a head alone
	key := dir + "all/world"
	if _, err := e.txn(ctx, "fail the generation", func(t clientv3.Txn) clientv3.Txn {
		return t.If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).Then(clientv3.OpPut(key, string(b), clientv3.WithLease(j.lease)))
	}); err != nil {
		return e.unreachable("fail the generation", err)
	}
	return merr
}

// byCreation sorts kvs by creation: registration order.
func byCreation(kvs []*mvccpb.KeyValue) {
	slices.SortFunc(kvs, func(a, b *mvccpb.KeyValue) int { return cmp.Compare(a.CreateRevision, b.CreateRevision) })
}

// etcdTally is the live registrations of a forming generation in registration order, as the node that counts
// them sees them: O(1) per registration or departure, O(n) only to propose.
type etcdTally struct {
	order []string             // instances in registration order; an entry is stale when its instance went or came again later
	live  map[string]tallyItem // by instance
	rev   int64                // the tally holds every registration up to this revision
}

type tallyItem struct {
	m   rendezvous.Member
	pos int // its entry in order
}

// newEtcdTally is the tally of the registrations kvs (read at revision rev).
func newEtcdTally(kvs []*mvccpb.KeyValue, rev int64) *etcdTally {
	kvs = slices.Clone(kvs)
	byCreation(kvs)
	t := &etcdTally{live: make(map[string]tallyItem, len(kvs)), rev: rev}
	for _, kv := range kvs {
		t.put(kv.Value)
	}
	return t
}

// put records a registration (a new one goes last; a registration made again keeps its place).
func (t *etcdTally) put(val []byte) {
	var r etcdRegistration
	if json.Unmarshal(val, &r) != nil || r.Instance == "" {
		return // not a registration: foreign or malformed
	}
	it, ok := t.live[r.Instance]
	if !ok {
		it.pos = len(t.order)
		t.order = append(t.order, r.Instance)
	}
	it.m = r.Member
	t.live[r.Instance] = it
}

// remove records that a registration vanished.
func (t *etcdTally) remove(inst string) {
	delete(t.live, inst)
	if len(t.order) > 64 && len(t.order) > 2*len(t.live) {
		order := make([]string, 0, len(t.live))
		for i, in := range t.order {
			if it, ok := t.live[in]; ok && it.pos == i {
				it.pos = len(order)
				t.live[in] = it
				order = append(order, in)
			}
		}
		t.order = order
	}
}

// first is the first n live registrations, in registration order.
func (t *etcdTally) first(n int) []rendezvous.Member {
	out := make([]rendezvous.Member, 0, min(n, len(t.live)))
	for i, in := range t.order {
		if len(out) == n {
			break
		}
		if it, ok := t.live[in]; ok && it.pos == i {
			out = append(out, it.m)
		}
	}
	return out
}
