package main

import (
	"context"
	"runtime"

	"go.uber.org/zap"

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
	req, perCPU := d.request()
	if perCPU && h.Device.V == topology.CPU {
		req.NProcs = runtime.NumCPU()
	}
	plan, err := topology.NewPlan(h, req)
	if err != nil {
		return h, nil, err
	}
	return h, plan, nil
}
