package host

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"tpurun/internal/failure"
	"tpurun/internal/topology"
	"tpurun/rendezvous"
	_ "tpurun/rendezvous/etcd" // a case on etcd: the launcher links it only where a program imports it
	"tpurun/rendezvous/static"
)

// TestPlacement: the host list and node rank a rendezvous gets come from detection's one reading of the
// environment (the rendezvous package reads none): TPU_WORKER_HOSTNAMES with TPU_WORKER_ID, else SLURM_JOB_NODELIST
// with SLURM_NODEID, else JOB_COMPLETION_INDEX alone; the hosts option wins; a malformed scheduler list stops only
// a run that would read it.
func TestPlacement(t *testing.T) {
	for i, tc := range []struct {
		env     map[string]string
		backend string
		conf    map[string]string
		rank    int // Config.NodeRank (-1: not given)
		hosts   []string
		want    int
		bad     string // the setting the error must name
	}{
		{env: map[string]string{"TPU_WORKER_ID": "1", "TPU_WORKER_HOSTNAMES": "a,b"}, backend: "static", rank: -1, hosts: []string{"a", "b"}, want: 1},
		{env: map[string]string{"SLURM_NODEID": "2", "SLURM_JOB_NODELIST": "n[1-3]"}, backend: "static", rank: -1, hosts: []string{"n1", "n2", "n3"}, want: 2},
		{env: map[string]string{"JOB_COMPLETION_INDEX": "5"}, backend: "static", rank: -1, want: 5},
		{env: map[string]string{"TPU_WORKER_ID": "1", "TPU_WORKER_HOSTNAMES": "a,b"}, backend: "static", rank: 0, hosts: []string{"a", "b"}, want: 0},
		{env: map[string]string{"TPU_WORKER_HOSTNAMES": "x,y", "SLURM_JOB_NODELIST": "n[1-2]"}, backend: "tcp", rank: -1,
			conf: map[string]string{"hosts": "h0, h1"}, hosts: []string{"h0", "h1"}, want: -1},
		{env: map[string]string{"TPU_WORKER_ID": "1", "TPU_WORKER_HOSTNAMES": "a,b"}, backend: "tcp", rank: -1, hosts: []string{"a", "b"}, want: -1},
		{env: map[string]string{"SLURM_NODEID": "0", "SLURM_JOB_NODELIST": "n[1-"}, backend: "static", rank: -1, bad: "SLURM_JOB_NODELIST"},
		{env: map[string]string{"SLURM_NODEID": "-1", "SLURM_JOB_NODELIST": "n1"}, backend: "static", rank: -1, bad: "SLURM_NODEID"},
		{env: map[string]string{"SLURM_NODEID": "0", "SLURM_JOB_NODELIST": "n[1-"}, backend: "etcd", rank: -1, want: -1},
		{env: map[string]string{}, backend: "static", rank: -1, conf: map[string]string{"hosts": "a,,b"}, bad: "hosts"},
		{env: map[string]string{}, backend: "static", rank: -1, conf: map[string]string{"hosts": "a,a"}, bad: "hosts"},
	} {
		h, err := topology.Detect(context.Background(), topology.Options{Device: "cpu", LookupEnv: func(k string) (string, bool) {
			v, ok := tc.env[k]
			return v, ok
		}, SysfsRoot: t.TempDir(), DevRoot: t.TempDir(), ProcRoot: t.TempDir()}, nil)
		if err != nil {
			t.Fatalf("case %d: detect: %v", i, err)
		}
		c := rendezvous.Config{Backend: tc.backend, NodeRank: tc.rank, NNodes: 2, Conf: tc.conf}
		if tc.backend == static.Name {
			c.NNodes = 0
		}
		err = place(&c, h)
		hosts, rank := c.Hosts, c.NodeRank
		if tc.bad != "" {
			if !errors.Is(err, failure.ErrConfig) && failure.ExitCode(err) != failure.ExitUsage || err == nil || !strings.Contains(err.Error(), tc.bad) {
				t.Errorf("case %d: error %v (exit %d), want a configuration error naming %s", i, err, failure.ExitCode(err), tc.bad)
			}
			continue
		}
		if err != nil || rank != tc.want || !reflect.DeepEqual(hosts, tc.hosts) {
			t.Errorf("case %d: hosts %q rank %d err %v; want %q %d", i, hosts, rank, err, tc.hosts, tc.want)
		}
	}
}
