package topology

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"go.uber.org/zap"
)

// metadata fills what env left open from the metadata server, when that is needed at all: not when the parent's
// TPU_SKIP_MDS_QUERY forbids it (GKE) or env and flags already describe the slice. A single host whose metadata
// fails falls back to what sysfs proves. It is asked on a single host too: what it answers decides whether the
// workers read it as xmp.spawn's children do (docs/TOPOLOGY.md).
func (d *detector) metadata(ctx context.Context) error {
	h := d.h
	envAnswers := h.Accelerator.IsSet() && (h.Hostnames.IsSet() || h.Accelerator.V.Hosts() == 1)
	skip := h.SkipMDS.IsSet()
	if envAnswers || (skip && len(h.Chips) > 0) {
		return nil
	}
	if skip {
		return &ConfigError{Name: "TPU_SKIP_MDS_QUERY", Value: strconv.Quote(h.SkipMDS.V), Problem: "forbids the metadata query but neither env nor sysfs describes the TPU slice",
			Sources: []Source{h.SkipMDS.Source}, Hint: "set TPU_ACCELERATOR_TYPE (and TPU_WORKER_ID, TPU_WORKER_HOSTNAMES for several hosts)"}
	}
	base := d.opts.MetadataURL
	if base == "" {
		if v, ok := d.lookup("GCE_METADATA_HOST"); ok {
			base = v
		}
	}
	d.md = NewMetadataClient(base, d.opts.HTTPClient, d.opts.MetadataBudget, d.log)
	err := d.fromMetadata(ctx)
	if err == nil {
		return nil
	}
	if len(h.Chips) > 0 && !h.Hostnames.IsSet() && errors.Is(err, ErrMetadata) {
		// Single host fallback: what sysfs proves is enough to run on this host.
		d.log.Warn("metadata server unusable; planning for this host alone from what sysfs proves", zap.Error(err))
		h.MetadataErr = err
		return nil
	}
	return err
}

// fromMetadata reads the slice from tpu-env (and accelerator-type, agent-worker-number, worker-network-endpoints
// where tpu-env lacks a value), and notes whether torch_xla in a worker could read the same from it.
func (d *detector) fromMetadata(ctx context.Context) error {
	h, md := d.h, d.md
	body, err := md.Get(ctx, KeyTPUEnv)
	if err != nil {
		return err
	}
	kv, err := ParseTPUEnv(body)
	if err != nil {
		return md.parsed(KeyTPUEnv, err)
	}
	src := Metadata(md.URL(KeyTPUEnv))
	if !h.Accelerator.IsSet() {
		t, ok := kv["ACCELERATOR_TYPE"]
		asrc, key := src, KeyTPUEnv
		if !ok {
			if t, err = md.Get(ctx, KeyAcceleratorType); err != nil {
				return err
			}
			asrc, key = Metadata(md.URL(KeyAcceleratorType)), KeyAcceleratorType
		}
		a, err := ParseAcceleratorType(t)
		if err != nil {
			return md.parsed(key, err)
		}
		h.Accelerator = val(a, asrc)
	}
	for _, b := range []struct {
		key string
		dst *Value[Bounds]
	}{{"HOST_BOUNDS", &h.HostBounds}, {"CHIPS_PER_HOST_BOUNDS", &h.ChipsPerHostBounds}} {
		if v, ok := kv[b.key]; ok && !b.dst.IsSet() {
			bb, err := ParseBounds(v)
			if err == nil && len(bb) != 3 {
				err = parseErrorf("bounds %q has %d numbers; a host grid has 3", v, len(bb))
			}
			if err != nil {
				return md.parsed(KeyTPUEnv, fmt.Errorf("%s: %w", b.key, err))
			}
			*b.dst = val(bb, src)
		}
	}
	for _, k := range []string{"MEGASCALE_COORDINATOR_ADDRESS", "MEGASCALE_NUM_SLICES", "MEGASCALE_SLICE_ID", "MEGASCALE_PORT"} {
		if v, ok := kv[k]; ok && v != "" {
			if h.Megascale == nil {
				h.Megascale = map[string]Value[string]{}
			}
			if _, given := h.Megascale[k]; !given {
				h.Megascale[k] = val(v, src)
			}
		}
	}
	complete := torchXLAReads(kv)
	if h.Accelerator.V.Hosts() == 1 {
		h.TorchXLAMetadata = complete
		return nil
	}
	if !h.WorkerID.IsSet() {
		v, ok := kv["WORKER_ID"]
		wsrc := src
		if !ok {
			if v, err = md.Get(ctx, KeyWorkerNumber); err != nil {
				return err
			}
			wsrc = Metadata(md.URL(KeyWorkerNumber))
		}
		n, err := ParseIndex(v)
		if err != nil {
			return md.parsed(KeyWorkerNumber, err)
		}
		h.WorkerID = val(n, wsrc)
	}
	if !h.Hostnames.IsSet() {
		body, err := md.Get(ctx, KeyEndpoints)
		if err != nil {
			return err
		}
		hosts, names, err := parseEndpoints(body)
		if err != nil {
			return md.parsed(KeyEndpoints, err)
		}
		h.Hostnames = val(hosts, Metadata(md.URL(KeyEndpoints)))
		h.HostnameEndpoints = names
		complete = complete && !names
	}
	h.TorchXLAMetadata = complete
	return nil
}

// torchXLAReads reports whether tpu-env holds what torch_xla's get_tpu_env callers read from it (tpu.py:
// version() reads ACCELERATOR_TYPE, worker_id() WORKER_ID, configure_topology() TPU_PROCESS_BOUNDS and
// TPU_CHIPS_PER_PROCESS_BOUNDS from v4 on, as three numbers), each parseable as torch_xla parses it.
func torchXLAReads(kv map[string]string) bool {
	a, err := ParseAcceleratorType(kv["ACCELERATOR_TYPE"])
	if err != nil {
		return false
	}
	if _, err := ParseIndex(kv["WORKER_ID"]); err != nil {
		return false
	}
	if a.Family.Version <= 3 {
		return true
	}
	for _, k := range []string{"TPU_PROCESS_BOUNDS", "TPU_CHIPS_PER_PROCESS_BOUNDS"} {
		if b, err := ParseBounds(kv[k]); err != nil || len(b) != 3 {
			return false
		}
	}
	return true
}
