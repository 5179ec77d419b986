package topology

import (
	"cmp"
	"fmt"
	"strconv"

	"tpurun/internal/failure"
)

// Slice validates the request against the host and returns the slice that Plan turns into env (docs/TOPOLOGY.md).
func (h *Host) Slice(req Request) (*Slice, error) {
	if !h.Device.V.Kind().FixedSlice() {
		return nil, &failure.ConfigError{Kind: ErrConfig, Field: failure.Device, Value: string(h.Device.V), Problem: "is not a TPU; a slice needs TPU chips", Sources: sources{h.Device.Source}}
	}
	r, err := h.resolve(req)
	if err != nil {
		return nil, err
	}
	s, err := h.newSlice(r)
	if err != nil {
		return nil, err
	}
	givenPB, givenProcs, err := h.givenProcessBounds()
	if err != nil {
		return nil, err
	}
	if r.spmd {
		err = h.spmdProcesses(s, r)
	} else {
		err = h.chipProcesses(s, r, givenPB, givenProcs)
	}
	if err == nil {
		err = h.processBounds(s, r, givenPB, givenProcs)
	}
	if err != nil {
		return nil, err
	}
	return s, nil
}

// resolved is a request resolved against the host: the run's hosts, this host's place among them, and SPMD.
type resolved struct {
	req      Request
	spmd     bool
	spmdSrc  Source
	hosts    []string // the run's hosts in node order: this host alone for a one-chip run
	hostsSrc Source
	node     int // this host's index in hosts
	// sliceHosts and sliceNode are the whole slice's hosts and this host's index in them.
	sliceHosts []string
	sliceNode  int
	single     bool // xmp.spawn(nprocs=1)'s one-chip run
}

// resolve places this host: among the rendezvous's hosts, else the slice's (env or metadata), else alone.
func (h *Host) resolve(req Request) (resolved, error) {
	t := h.tpu()
	r := resolved{req: req, spmd: req.SPMD, spmdSrc: Flag("spmd"), hosts: []string{"localhost"}, hostsSrc: Default()}
	if !r.spmd && h.SPMD.V {
		r.spmd, r.spmdSrc = true, h.SPMD.Source
	}
	switch {
	case req.Hosts != nil:
		r.hosts, r.hostsSrc, r.node = req.Hosts, Derived("rendezvous"), req.NodeRank
	case t.Hostnames.IsSet():
		r.hosts, r.hostsSrc, r.node = t.Hostnames.V, t.Hostnames.Source, t.WorkerID.V
	}
	if err := h.checkHosts(r); err != nil {
		return r, err
	}
	// --nprocs 1 without a rendezvous is xmp.spawn(nprocs=1)'s one-chip run, whatever the slice (pjrt.py).
	r.single = !r.spmd && req.NProcs == 1 && req.Hosts == nil
	r.sliceHosts, r.sliceNode = r.hosts, r.node
	if r.single {
		r.hosts, r.node = []string{r.hosts[r.node]}, 0
	}
	return r, nil
}

// checkHosts refuses a node that is not one of the hosts, and hosts that the accelerator type or given host
// bounds contradict.
func (h *Host) checkHosts(r resolved) error {
	hosts, node := r.hosts, r.node
	if len(hosts) == 0 || node < 0 || node >= len(hosts) {
		return &failure.ConfigError{Kind: ErrConfig, Field: failure.NodeRank, Value: strconv.Itoa(node), Problem: fmt.Sprintf("is not an index of the %d hosts", len(hosts)),
			Sources: sources{r.hostsSrc}, Choices: indexChoices(len(hosts))}
	}
	if a := h.tpu().Accelerator; a.IsSet() && a.V.Hosts() != len(hosts) && (len(hosts) > 1 || a.V.Hosts() > 1) {
		return &failure.ConfigError{Kind: ErrConfig, Field: failure.AcceleratorType, Value: a.V.Type,
			Problem: fmt.Sprintf("has %d hosts but %d are listed", a.V.Hosts(), len(hosts)), Sources: sources{a.Source, r.hostsSrc},
			Hint: "list every host of the slice, or fix the accelerator type"}
	}
	if hb := h.tpu().HostBounds; r.req.Hosts != nil && given(hb.Source) && hb.V.Product() != len(hosts) {
		return &failure.ConfigError{Kind: ErrConfig, Field: failure.Named(hb.Source.Name), Value: hb.V.String(),
			Problem: fmt.Sprintf("describes %d hosts but the rendezvous agreed on %d", hb.V.Product(), len(hosts)),
			Sources: sources{hb.Source, r.hostsSrc}, Hint: "fix or unset " + hb.Source.Name}
	}
	return nil
}

// newSlice is the slice of r before its processes are laid out.
func (h *Host) newSlice(r resolved) (*Slice, error) {
	t := h.tpu()
	n := len(t.Usable.V)
	if _, err := ChipBounds(n); err != nil { // detection leaves at least one usable chip
		return nil, subsetError(h)
	}
	s := &Slice{Hosts: r.hosts, NodeRank: r.node, SPMD: r.spmd, SingleProcess: r.single, SliceHosts: r.sliceHosts, WorkerID: r.sliceNode,
		Accelerator: t.Accelerator.V.Type, Megascale: map[string]string{}, PortBase: r.req.TPUPortBase}
	s.SkipMDS, _ = h.WorkerSkipMDS(r.req)
	for key, v := range t.Megascale {
		s.Megascale[key] = v.V
	}
	s.ChipsPerHostBounds = t.ChipsPerHostBounds.V
	s.HostBounds = t.HostBounds.V
	if s.HostBounds == nil {
		s.HostBounds = Bounds{1, 1, len(r.sliceHosts)}
	}
	if s.ChipsPerHostBounds == nil {
		s.ChipsPerHostBounds, _ = ChipBounds(n)
	}
	return s, nil
}

// spmdProcesses lays out SPMD: ONE process per host that sees every usable chip.
func (h *Host) spmdProcesses(s *Slice, r resolved) error {
	t := h.tpu()
	if k := r.req.NProcs; k > 1 {
		return &failure.ConfigError{Kind: ErrConfig, Field: failure.NProcs, Value: strconv.Itoa(k),
			Problem: "contradicts SPMD, which runs ONE process per host that sees all local chips", Sources: sources{r.req.NProcsSource, r.spmdSrc},
			Choices: []string{"1"}, Hint: "leave nprocs unset, or turn SPMD off (XLA_USE_SPMD)"}
	}
	n := len(t.Usable.V)
	s.ProcsPerHost = 1
	s.ChipsPerProcess, _ = ChipBounds(n)
	s.ChipsPerHostBounds = subsetChipBounds(s.ChipsPerHostBounds, n, len(t.Chips))
	// Every usable chip, always: under TORCHELASTIC_RUN_ID torch_xla's xla:// handler runs its one-process
	// setup, which sets TPU_VISIBLE_CHIPS=0 when it is unset (tpu.py configure_one_chip_topology).
	s.VisibleChips = t.Usable.V
	s.ProcessBounds = s.HostBounds
	s.ReplicasPerProcess = 1
	return nil
}

// chipProcesses lays out one process per chip on each host, as many as procsPerHost says.
func (h *Host) chipProcesses(s *Slice, r resolved, givenPB Bounds, givenProcs int) error {
	k, err := h.procsPerHost(r, givenPB, givenProcs)
	if err != nil {
		return err
	}
	s.ProcsPerHost = k
	s.ChipsPerProcess = Bounds{1, 1, 1}
	s.VisibleChips = h.tpu().Usable.V[:k]
	s.ChipsPerHostBounds = subsetChipBounds(s.ChipsPerHostBounds, k, len(h.tpu().Chips))
	s.ReplicasPerProcess = max(h.ReplicasPerChip, 1)
	switch {
	case r.single:
		s.ReplicasPerProcess = 1 // xmp.spawn(nprocs=1) calls fn once
		s.ProcessBounds = Bounds{1, 1, 1}
	case len(r.hosts) > 1:
		s.ProcessBounds = s.HostBounds.Mul(s.ChipsPerHostBounds)
	default:
		s.ProcessBounds, _ = ChipBounds(k)
	}
	return nil
}

// procsPerHost is the number of one-chip processes on each host: nprocs, else the size of a given
// TPU_PROCESS_BOUNDS smaller than the chips (torch_xla's num_local_processes), else one per usable chip.
func (h *Host) procsPerHost(r resolved, givenPB Bounds, givenProcs int) (int, error) {
	n := len(h.tpu().Usable.V)
	k := r.req.NProcs
	if k == 0 && givenPB != nil && len(r.hosts) == 1 && givenProcs < n {
		if err := h.checkDerivedProcs(givenProcs, n, h.chipsDesc()); err != nil {
			return 0, err
		}
		k = givenProcs
	}
	k = cmp.Or(k, n)
	return k, h.checkProcs(k, r)
}

// checkProcs refuses a process count that is not a valid split of the usable chips, or differs from what the env
// gives this launcher or what the other hosts of the slice run.
func (h *Host) checkProcs(k int, r resolved) error {
	t := h.tpu()
	n := len(t.Usable.V)
	from := sources{t.Usable.Source}
	switch {
	case (t.NumDevices.IsSet() || t.VisibleChips.IsSet()) && k != n:
		// TPU_NUM_DEVICES or TPU_VISIBLE_CHIPS limited the usable chips: nprocs must use exactly those.
		return &failure.ConfigError{Kind: ErrConfig, Field: failure.NProcs, Value: strconv.Itoa(k),
			Problem: fmt.Sprintf("contradicts %s, which gives this launcher %d chips", t.Usable.Source.Name, n),
			Sources: append(sources{r.req.NProcsSource}, t.usableFrom()...), Choices: []string{strconv.Itoa(n)},
			Hint: "or leave nprocs unset, or change " + t.Usable.Source.Name}
	case len(r.hosts) > 1 && k != n:
		return &failure.ConfigError{Kind: ErrConfig, Field: failure.NProcs, Value: strconv.Itoa(k),
			Problem: fmt.Sprintf("does not match the %s on each host of this %d-host slice", h.chipsDesc(), len(r.hosts)), Sources: append(from, r.hostsSrc),
			Choices: []string{strconv.Itoa(n)}, Hint: "or leave it unset (a multi-host slice runs one process per chip on every host)"}
	case k > n:
		return &failure.ConfigError{Kind: ErrConfig, Field: failure.NProcs, Value: strconv.Itoa(k),
			Problem: fmt.Sprintf("is more than the %s on this host", h.chipsDesc()), Sources: from, Choices: splitChoices(n), Hint: "or leave it unset"}
	case !validSplit(k, n):
		return &failure.ConfigError{Kind: ErrConfig, Field: failure.NProcs, Value: strconv.Itoa(k),
			Problem: fmt.Sprintf("is not a valid split of the %s on this host", h.chipsDesc()), Sources: from, Choices: splitChoices(n), Hint: "or leave it unset"}
	}
	return nil
}

// chipsDesc describes the usable chips for a message: "8 v5e chips".
func (h *Host) chipsDesc() string {
	return fmt.Sprintf("%d %s chips", len(h.tpu().Usable.V), familyLabel(h.tpu().Family))
}

// processBounds settles TPU_PROCESS_BOUNDS: a given grid must count the plan's processes and is kept as given;
// otherwise tpu7x's whole-slice grid gets its core dimension where the workers read the metadata server.
func (h *Host) processBounds(s *Slice, r resolved, givenPB Bounds, givenProcs int) error {
	t := h.tpu()
	if givenPB != nil {
		// Compared with the plan by process count: a given grid of the same size is kept as given.
		if want := s.ProcsPerHost * len(r.hosts); givenProcs != want {
			return h.processCountError(givenProcs, want, s.ProcsPerHost, len(r.hosts), r.req)
		}
		s.ProcessBounds = givenPB
		if s.SkipMDS == "" {
			s.ProcessBounds = t.ProcessBounds.V // as given: xmp.spawn's children keep it (setdefault)
		}
		return nil
	}
	if t.Family == "tpu7x" && !r.spmd && !r.single && s.SkipMDS == "" && s.ProcsPerHost == len(t.Chips) {
		// torch_xla's configure_topology appends a core dimension for generation 7 to the whole slice's grid
		// (unverified in practice); only where workers read the metadata server, as under TPU_SKIP_MDS_QUERY the
		// xla:// handler re-parses exactly three numbers (tpu.py MeshShape.from_string).
		s.ProcessBounds = append(append(Bounds(nil), s.ProcessBounds...), 2)
	}
	return nil
}

// processCountError refuses a given TPU_PROCESS_BOUNDS that counts other than the plan's processes.
func (h *Host) processCountError(givenProcs, want, k, hosts int, req Request) error {
	t := h.tpu()
	core := ""
	if len(t.ProcessBounds.V) == 4 {
		core = " (the trailing core dimension of tpu7x not counted)"
	}
	return &failure.ConfigError{Kind: ErrConfig, Field: failure.Named("TPU_PROCESS_BOUNDS"),
		Value:   t.ProcessBounds.V.String(),
		Problem: fmt.Sprintf("has %d processes%s but the plan runs %d (%d per host on %d hosts)", givenProcs, core, want, k, hosts),
		Sources: sources{t.ProcessBounds.Source, req.NProcsSource, t.Usable.Source}, Hint: "unset TPU_PROCESS_BOUNDS (tpurun sets it per worker) or make nprocs match it"}
}

// given reports whether a value came from outside (env, flag, metadata), not derived or defaulted by tpurun.
func given(s Source) bool { return s.IsSet() && s.Kind != FromDerived && s.Kind != FromDefault }

// givenProcessBounds is the parent's TPU_PROCESS_BOUNDS as a three-number grid and the processes it counts (nil
// when unset); tpu7x's trailing core dimension (",2") is dropped, a fourth number elsewhere refused.
func (h *Host) givenProcessBounds() (Bounds, int, error) {
	t := h.tpu()
	if !t.ProcessBounds.IsSet() {
		return nil, 0, nil
	}
	b := t.ProcessBounds.V
	if len(b) == 4 {
		if t.Family != "tpu7x" || b[3] != 2 {
			return nil, 0, &failure.ConfigError{Kind: ErrConfig, Field: failure.Named("TPU_PROCESS_BOUNDS"), Value: b.String(),
				Problem: "has 4 numbers; only tpu7x takes a fourth (its core dimension, 2)", Sources: sources{t.ProcessBounds.Source, t.ChipsSource},
				Hint: "use three numbers such as 2,2,1, or unset it (tpurun sets it per worker)"}
		}
		b = b[:3]
	}
	b = append(Bounds(nil), b...)
	return b, b.Product(), nil
}

// checkDerivedProcs checks the process count that a TPU_PROCESS_BOUNDS smaller than the chips gives when nprocs is
// unset: a valid split, and the same count as a TPU_NUM_DEVICES / TPU_VISIBLE_CHIPS limit.
func (h *Host) checkDerivedProcs(k, n int, desc string) error {
	t := h.tpu()
	pb := t.ProcessBounds
	if t.NumDevices.IsSet() || t.VisibleChips.IsSet() {
		return &failure.ConfigError{Kind: ErrConfig, Field: failure.Named("TPU_PROCESS_BOUNDS"), Value: pb.V.String(),
			Problem: fmt.Sprintf("asks for %d processes but %s gives this launcher %d chips", k, t.Usable.Source.Name, n),
			Sources: sources{pb.Source, t.Usable.Source}, Hint: "unset one of them"}
	}
	if !validSplit(k, n) {
		return &failure.ConfigError{Kind: ErrConfig, Field: failure.Named("TPU_PROCESS_BOUNDS"), Value: pb.V.String(),
			Problem: fmt.Sprintf("asks for %d processes, which is not a valid split of the %s on this host", k, desc),
			Sources: sources{pb.Source, t.Usable.Source}, Choices: boundsChoices(n), Hint: "or unset it"}
	}
	return nil
}

// boundsChoices lists the process grids of the valid splits of n chips.
func boundsChoices(n int) []string {
	var out []string
	for _, c := range []int{1, 2, 4, 8} {
		if c <= n && validSplit(c, n) {
			b, _ := ChipBounds(c)
			out = append(out, b.String())
		}
	}
	return out
}

// SkipReason says why the workers get the TPU_SKIP_MDS_QUERY they get (Host.WorkerSkipMDS).
type SkipReason int

// The reasons for the workers' TPU_SKIP_MDS_QUERY.
const (
	SkipFromParent   SkipReason = iota // the parent's value (GKE), kept
	SkipReadMetadata                   // unset: workers read the metadata server, as xmp.spawn's children do
	SkipSupplied                       // "true": tpurun planned without the metadata server and hands the answer in env
	SkipUnknownType                    // unset: env cannot carry the accelerator type torch_xla's version() needs
)

// WorkerSkipMDS is the TPU_SKIP_MDS_QUERY the workers of req get ("" leaves it unset), and why. torch_xla reads the
// slice from env exactly when it is set (tpu.py _using_env_vars), so the workers read the source tpurun planned
// from: the parent's value; the metadata server when it holds all torch_xla reads; else env ("true", as GKE
// writes it) when env can carry the accelerator type.
func (h *Host) WorkerSkipMDS(req Request) (string, SkipReason) {
	t := h.tpu()
	sliceHosts := max(len(t.Hostnames.V), 1)
	metadataWorld := req.Hosts == nil || (len(req.Hosts) == sliceHosts && req.NodeRank == t.WorkerID.V)
	switch {
	case t.SkipMDS.IsSet():
		return t.SkipMDS.V, SkipFromParent
	case t.TorchXLAMetadata && metadataWorld:
		return "", SkipReadMetadata
	case t.Accelerator.IsSet():
		return "true", SkipSupplied
	}
	return "", SkipUnknownType
}
