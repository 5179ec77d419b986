package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/pflag"

	"tpurun/launcher"
)

// statusFlags are --status-addr and --status-allow-remote: the live /healthz and /metrics endpoint.
type statusFlags struct {
	addr        string
	allowRemote bool
}

func addStatusFlags(fs *pflag.FlagSet) *statusFlags {
	s := &statusFlags{}
	fs.StringVar(&s.addr, "status-addr", "", "serve /healthz and /metrics (Prometheus) on HOST:PORT, loopback only (port 0 picks one; the address is printed on stderr)")
	fs.BoolVar(&s.allowRemote, "status-allow-remote", false, "allow a non-loopback --status-addr (the endpoint has no authentication)")
	return s
}

// start serves the status of the run configured by cfg; the returned function stops the server.
func (s *statusFlags) start(cfg *launcher.Config, stderr io.Writer) (*launcher.Status, func(), error) {
	if s.addr == "" {
		return nil, func() {}, nil
	}
	st := launcher.NewStatus(cfg.MaxRestarts)
	st.Watch(cfg)
	addr, stop, err := st.Serve(context.Background(), s.addr, s.allowRemote)
	if err != nil {
		return nil, nil, err
	}
	fmt.Fprintf(stderr, "tpurun: status on http://%s/metrics and /healthz\n", addr)
	return st, stop, nil
}
