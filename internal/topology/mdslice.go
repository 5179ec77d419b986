package topology

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"tpurun/internal/failure"

	"go.uber.org/zap"
)

// metadata fills what env left open from the metadata server, unless TPU_SKIP_MDS_QUERY forbids it or flags and
// env describe the slice; a single host whose metadata fails falls back to sysfs. A single host asks too: the
// answer decides whether the workers read it as xmp.spawn's children do (docs/TOPOLOGY.md).
func (d *detector) metadata(ctx context.Context) error {
	h, t := d.h, d.h.tpu()
	envAnswers := t.Accelerator.IsSet() && (t.Hostnames.IsSet() || t.Accelerator.V.Hosts() == 1)
	skip := t.SkipMDS.IsSet()
	if envAnswers || (skip && len(t.Chips) > 0) {
		return nil
	}
	if skip {
		return &failure.ConfigError{Kind: ErrConfig, Field: failure.Named("TPU_SKIP_MDS_QUERY"), Value: strconv.Quote(t.SkipMDS.V), Problem: "forbids the metadata query but neither env nor sysfs describes the TPU slice",
			Sources: sources{t.SkipMDS.Source}, Hint: "set TPU_ACCELERATOR_TYPE (and TPU_WORKER_ID, TPU_WORKER_HOSTNAMES for several hosts)"}
	}
	host, _ := d.lookup("GCE_METADATA_HOST")
	d.md = NewMetadataClient(cmp.Or(d.opts.MetadataURL, host), d.opts.MetadataBudget, d.log)
	err := d.fromMetadata(ctx)
	if err == nil {
		return nil
	}
	if len(t.Chips) > 0 && !t.Hostnames.IsSet() && errors.Is(err, ErrMetadata) {
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
	t := h.tpu()
	// The accelerator type: tpu-env's ACCELERATOR_TYPE, else the key accelerator-type.
	err = mdValue(ctx, d, &t.Accelerator, kv, "ACCELERATOR_TYPE", KeyTPUEnv, KeyAcceleratorType, src, ParseAcceleratorType)
	if err != nil {
		return err
	}
	if err := d.mdBounds(kv, src); err != nil {
		return err
	}
	for _, k := range megascaleNames {
		if v, ok := kv[k]; ok && v != "" {
			h.setMegascale(k, val(v, src))
		}
	}
	complete := torchXLAReads(kv)
	if t.Accelerator.V.Hosts() > 1 {
		// This host's index: tpu-env's WORKER_ID, else the key agent-worker-number.
		err := mdValue(ctx, d, &t.WorkerID, kv, "WORKER_ID", KeyWorkerNumber, KeyWorkerNumber, src, ParseIndex)
		if err != nil {
			return err
		}
		names, err := d.mdHostnames(ctx)
		if err != nil {
			return err
		}
		complete = complete && !names
	}
	t.TorchXLAMetadata = complete
	return nil
}

// mdValue sets dst, unless flags or env set it, from tpu-env's key, else from the metadata key alt. A value that
// does not parse names the key bad (tpu-env's value) or alt.
func mdValue[T any](ctx context.Context, d *detector, dst *Value[T], kv map[string]string, key, bad, alt string,
	src Source, parse func(string) (T, error)) error {
	if dst.IsSet() {
		return nil
	}
	v, ok := kv[key]
	if !ok {
		var err error
		if v, err = d.md.Get(ctx, alt); err != nil {
			return err
		}
		src, bad = Metadata(d.md.URL(alt)), alt
	}
	x, err := parse(v)
	if err != nil {
		return d.md.parsed(bad, err)
	}
	*dst = val(x, src)
	return nil
}

// mdBounds reads tpu-env's HOST_BOUNDS and CHIPS_PER_HOST_BOUNDS where env gave none.
func (d *detector) mdBounds(kv map[string]string, src Source) error {
	h := d.h
	for _, b := range []struct {
		key string
		dst *Value[Bounds]
	}{{"HOST_BOUNDS", &h.tpu().HostBounds}, {"CHIPS_PER_HOST_BOUNDS", &h.tpu().ChipsPerHostBounds}} {
		v, ok := kv[b.key]
		if !ok || b.dst.IsSet() {
			continue
		}
		bb, err := parseGrid(v)
		if err != nil {
			return d.md.parsed(KeyTPUEnv, fmt.Errorf("%s: %w", b.key, err))
		}
		*b.dst = val(bb, src)
	}
	return nil
}

// mdHostnames reads the slice's hosts from worker-network-endpoints, unless env gave them, and reports whether it
// listed host names alone (which torch_xla cannot read).
func (d *detector) mdHostnames(ctx context.Context) (names bool, err error) {
	h, md := d.h, d.md
	if h.tpu().Hostnames.IsSet() {
		return false, nil
	}
	body, err := md.Get(ctx, KeyEndpoints)
	if err != nil {
		return false, err
	}
	hosts, names, err := parseEndpoints(body)
	if err != nil {
		return false, md.parsed(KeyEndpoints, err)
	}
	h.tpu().Hostnames = val(hosts, Metadata(md.URL(KeyEndpoints)))
	h.tpu().HostnameEndpoints = names
	return names, nil
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
