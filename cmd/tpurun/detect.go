package main

import (
	"context"
	"errors"

	"go.uber.org/zap"

	"tpurun/launcher"
	"tpurun/launcher/topology"
)

// detectPlan detects the host exactly once (flags + os env + sysfs/dev + metadata) and builds its plan.
func (d *deviceFlags) detectPlan(ctx context.Context, log *zap.Logger) (*topology.Host, *topology.Plan, error) {
	opts, err := d.options(log)
	if err != nil {
		return nil, nil, err
	}
	h, err := topology.Detect(ctx, opts)
	if err != nil {
		return nil, nil, err
	}
	plan, err := topology.NewPlan(h, d.request(h))
	if err != nil {
		return h, nil, err
	}
	return h, plan, nil
}

// prepare is what the run path does before it starts anything: detect, plan, and check that no other process
// holds one of the chips (unless --force). It sets cfg.Plan and cfg.NodeRank. Its errors map to exit codes with
// topologyExit.
func (d *deviceFlags) prepare(ctx context.Context, cfg *launcher.Config, log *zap.Logger) error {
	h, plan, err := d.detectPlan(ctx, log)
	if err != nil {
		return err
	}
	switch err := h.CheckFree(); {
	case err == nil:
	case !errors.Is(err, topology.ErrChipBusy):
		log.Warn("could not check whether another process holds a chip", zap.Error(err))
	case d.force:
		log.Warn("starting although another process holds a chip (--force)", zap.Error(err))
	default:
		return err
	}
	if err := plan.CheckPorts(topology.SoloNodeRank(h), h.ProcRoot, nil); err != nil {
		return err
	}
	cfg.Plan, cfg.NodeRank = plan, topology.SoloNodeRank(h)
	log.Debug("plan", zap.String("device", string(plan.Device)), zap.Stringer("device_source", h.Device.Source),
		zap.Int("workers", len(plan.Workers)), zap.Int("node_rank", cfg.NodeRank))
	return nil
}
