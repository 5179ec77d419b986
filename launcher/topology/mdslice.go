package topology

import (
	"context"
	"errors"
	"fmt"

	"go.uber.org/zap"
)

// metadata fills what env left open from the metadata server, when that is needed at all.
func (d *detector) metadata(ctx context.Context) error {
	h := d.h
	envAnswers := h.Accelerator.IsSet() && (h.Hostnames.IsSet() || h.Accelerator.V.Hosts() == 1)
	_, skip := d.lookup("TPU_SKIP_MDS_QUERY")
	if envAnswers || h.provenSingleHost() || (skip && len(h.Chips) > 0) {
		return nil
	}
	if skip {
		return &ConfigError{Name: "TPU_SKIP_MDS_QUERY", Value: "set", Problem: "forbids the metadata query but neither env nor sysfs describes the TPU slice",
			Sources: []Source{Env("TPU_SKIP_MDS_QUERY")}, Hint: "set TPU_ACCELERATOR_TYPE (and TPU_WORKER_ID, TPU_WORKER_HOSTNAMES for several hosts)"}
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
		asrc := src
		if !ok {
			if t, err = md.Get(ctx, KeyAcceleratorType); err != nil {
				return err
			}
			asrc = Metadata(md.URL(KeyAcceleratorType))
		}
		a, err := ParseAcceleratorType(t)
		if err != nil {
			return md.parsed(KeyTPUEnv, err)
		}
		h.Accelerator = val(a, asrc)
	}
	for _, b := range []struct {
		key string
		dst *Value[Bounds]
	}{{"HOST_BOUNDS", &h.HostBounds}, {"CHIPS_PER_HOST_BOUNDS", &h.ChipsPerHostBounds}} {
		if v, ok := kv[b.key]; ok && !b.dst.IsSet() {
			bb, err := ParseBounds(v)
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
	if h.Accelerator.V.Hosts() == 1 {
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
		hosts, err := ParseEndpoints(body)
		if err != nil {
			return md.parsed(KeyEndpoints, err)
		}
		h.Hostnames = val(hosts, Metadata(md.URL(KeyEndpoints)))
	}
	return nil
}
