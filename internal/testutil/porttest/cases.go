package porttest

import (
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"tpurun/internal/testutil"
)

var netSplit = net.SplitHostPort

// Shorthands for the workers.
const (
	py     = "{bin}/touch_rank.py"
	sh     = "{bin}/touch_rank.sh"
	entry  = "{bin}/entry.py"
	initM  = "{bin}/init_method.py"
	isTE   = "{bin}/is_torchelastic_launched.py"
	c10dEP = "--rdzv-endpoint=localhost:{port}"
)

// NotPorted are the cases of those files that cannot run against any launcher's command line, or that test what
// tpurun deliberately does otherwise (README.md, "torchrun compatibility"), with the reason.
var NotPorted = map[string]string{
	testRun + ":test_nproc_xpu_launch_configurations":      "mocks torch.xpu; tpurun knows no XPU (--nproc-per-node xpu is refused)",
	testRun + ":test_launch_elastic_agent_raise_exception": "mocks LocalElasticAgent.run",
	testRun + ":test_launch_shutdown":                      "mocks LocalElasticAgent and the rendezvous handler",
	testRun + ":test_is_not_torchelastic_launched":         "runs the script without a launcher",
	testRun + ":test_virtual_local_rank":                   "needs two CUDA GPUs and torch.compile; tpurun has --isolate-gpus, not --virtual-local-rank",
	runTest + ":test_launch_elastic_agent_raise_exception": "mocks LocalElasticAgent.run",
	runTest + ":test_launch_shutdown":                      "mocks LocalElasticAgent and the rendezvous handler",
	runTest + ":test_is_not_torchelastic_launched":         "runs the script without a launcher",
	runTest + ":test_init_method_tcp":                      "runs the script without a launcher",
	runTest + ":test_init_method_env":                      "runs the script without a launcher",
	lea + ":check_master_addr_port_override":               "the agent API's master_addr/master_port override; torchrun's command line has none beside the static rendezvous",
	lea + ":run_function_with_return_value":                "the agent API returns a function's value; torchrun's command line cannot (tpurun's --fn can)",
	lea + ":barrier_failed":                                "mocks the store barrier",
	lea + ":shutdown_called":                               "mocks start_processes",
}

// nprocCase is test_run.py's _test_nproc_launch_configuration: --nproc-per-node V, then n files. Each call has a
// run id of its own (upstream: uuid4), so a second call in one case is a new job, not the finished one.
func nprocCase(from, v string, want func(h host) int, dashes bool, etcd bool) portCase {
	return portCase{from: from, etcd: etcd, perHost: true, body: func(r *run) {
		r.id = newRunID()
		args := []string{"--nnodes=1", "--nproc-per-node=" + v, "--rdzv-id={id}", "--monitor-interval=1", "--start-method=spawn", "--no-python"}
		if !dashes {
			args = []string{"--nnodes=1", "--nproc_per_node=" + v, "--rdzv_backend=etcd", "--rdzv_endpoint={etcd}", "--rdzv_id={id}",
				"--monitor_interval=1", "--start_method=spawn", "--no_python"}
		}
		a := r.launch(nil, append(args, sh, "{dir}")...)
		if want == nil {
			r.refused(a)
			return
		}
		r.ok(a)
		r.touched(want(r.host))
	}}
}

func four(host) int { return 4 }

// bashCase is test_launch_user_script_bash and _default_nproc: --no-python with --module is refused, then the
// shell script runs on n workers.
func bashCase(from string, args []string, n int, etcd bool) portCase {
	return portCase{from: from, etcd: etcd, body: func(r *run) {
		r.refused(r.launch(nil, append(append(args, "--module"), sh, "{dir}")...))
		r.ok(r.launch(nil, append(args, sh, "{dir}")...))
		r.touched(n)
	}}
}

// pyCase runs touch_rank.py under args and expects n files.
func pyCase(from string, args []string, n int, etcd bool) portCase {
	return portCase{from: from, etcd: etcd, body: func(r *run) {
		r.ok(r.launch(nil, append(args, py, "--touch-file-dir={dir}")...))
		r.touched(n)
	}}
}

// agentsCase starts one tpurun per command line at once and expects every one to exit 0 and n files.
func agentsCase(from string, n int, etcd bool, lines ...[]string) portCase {
	return portCase{from: from, etcd: etcd, body: func(r *run) {
		var as []*agent
		for _, l := range lines {
			as = append(as, r.start(nil, l...))
		}
		for _, a := range as {
			r.wait(a)
			r.ok(a)
		}
		r.touched(n)
	}}
}

// leaAgent is the torchrun command line of one agent of local_elastic_agent_test.py's run_agent: its nodes,
// workers, rendezvous, restarts and role (a tee of all streams when tee), then the entry point and its arguments.
func leaAgent(backend string, nnodes string, nproc, restarts int, role string, tee bool, isHost string, ep ...string) []string {
	args := []string{"--nnodes=" + nnodes, "--nproc-per-node=" + strconv.Itoa(nproc), "--rdzv-backend=" + backend, "--rdzv-id={id}",
		"--max-restarts=" + strconv.Itoa(restarts), "--monitor-interval=0.01", "--start-method=spawn", "--role=" + role}
	if backend == "etcd" {
		args = append(args, "--rdzv-endpoint={etcd}")
	} else {
		args = append(args, c10dEP)
	}
	if isHost != "" {
		args = append(args, "--rdzv-conf=is_host="+isHost)
	}
	if tee {
		args = append(args, "--tee=3")
	}
	return append(append(args, entry), ep...)
}

// leaOne is run_agent with one agent: every worker must succeed.
func leaOne(from, backend string, nproc, restarts int, torch bool, env []string, ep ...string) portCase {
	return portCase{from: from, torch: torch, etcd: backend == "etcd", body: func(r *run) {
		r.ok(r.launch(env, leaAgent(backend, "1", nproc, restarts, "default", false, "", ep...)...))
	}}
}

// leaJob is run_job: one agent per configuration (role, workers), agent 0 hosting the c10d store, all succeed.
func leaJob(from, backend string, torch bool, env []string, confs []struct {
	role  string
	nproc int
}, tee bool, ep ...string) portCase {
	return portCase{from: from, torch: torch, etcd: backend == "etcd", body: func(r *run) {
		var as []*agent
		for i, c := range confs {
			isHost := ""
			if backend == "c10d" {
				isHost = strconv.FormatBool(i == 0)
			}
			as = append(as, r.start(env, leaAgent(backend, strconv.Itoa(len(confs)), c.nproc, 0, c.role, tee, isHost, ep...)...))
		}
		for _, a := range as {
			r.wait(a)
		}
		r.allOK(as...)
	}}
}

type conf = struct {
	role  string
	nproc int
}

func confs(role string, nprocs ...int) []conf {
	var out []conf
	for _, n := range nprocs {
		out = append(out, conf{role, n})
	}
	return out
}

func portCases() []portCase {
	tr := func(name string) string { return testRun + ":" + name }
	rt := func(name string) string { return runTest + ":" + name }
	le := func(name string) string { return lea + ":" + name }
	dash := []string{"--nnodes=1", "--nproc-per-node=4", "--rdzv-id={id}", "--monitor-interval=1", "--start-method=spawn"}
	etcd1 := []string{"--nnodes=1", "--nproc_per_node=4", "--rdzv_backend=etcd", "--rdzv_endpoint={etcd}", "--rdzv_id={id}",
		"--monitor_interval=1", "--start_method=spawn"}
	caffe2 := func(u string) []string {
		return []string{"--nnodes=1", "--nproc" + u + "per" + u + "node=4", "--monitor" + u + "interval=1", "--start" + u + "method=spawn",
			"--master" + u + "addr=localhost", "--master" + u + "port={port}", "--node" + u + "rank=0"}
	}
	elastic := []string{"--nnodes=1:2", "--nproc-per-node=4", "--rdzv-backend=c10d", c10dEP, "--rdzv-conf='join_timeout=5,last_call_timeout=1,timeout=5'",
		"--rdzv-id={id}", "--monitor-interval=1", "--start-method=spawn"}
	elasticEtcd := []string{"--nnodes=1:2", "--nproc_per_node=4", "--rdzv_backend=etcd", "--rdzv_endpoint={etcd}", "--rdzv_id={id}",
		"--monitor_interval=1", "--start_method=spawn"}
	multi := []string{"--nnodes=1:2", "--nproc-per-node=4", "--rdzv-backend=c10d", c10dEP, "--rdzv_conf=timeout=5", "--rdzv-id={id}",
		"--monitor-interval=1", "--start-method=spawn", py, "--touch-file-dir={dir}"}
	multiEtcd := append(append([]string(nil), elasticEtcd...), py, "--touch_file_dir={dir}")
	return []portCase{
		// test_run.py (torchrun 2.x)
		pyCase(tr("test_launch_user_script_python"), dash, 4, false),
		pyCase(tr("test_launch_user_script_python_caffe2_bc"), caffe2("-"), 4, false),
		bashCase(tr("test_launch_user_script_bash"), append(append([]string(nil), dash...), "--no-python"), 4, false),
		bashCase(tr("test_launch_user_script_default_nproc"), []string{"--nnodes=1", "--rdzv-id={id}", "--monitor-interval=1",
			"--start-method=spawn", "--no-python"}, 1, false),
		{from: tr("test_launch_with_env_vars"), body: envVarsCase(false)},
		nprocCase(tr("test_nproc_launch_auto_configurations"), "auto", autoProcs, true, false),
		nprocCase(tr("test_nproc_launch_number_configurations"), "4", four, true, false),
		nprocCase(tr("test_nproc_launch_unknown_configurations"), "unknown", nil, true, false),
		gpuCase(tr("test_nproc_gpu_launch_configurations"), true),
		pyCase(tr("test_launch_elastic"), elastic, 4, false),
		{from: tr("test_launch_elastic_worker_raise_exception"), body: failCase(append(append([]string(nil), elastic...), "--max-restarts=0"))},
		pyCase(tr("test_launch_standalone"), []string{"--nnodes=1", "--nproc-per-node=4", "--standalone", "--monitor-interval=1", "--start-method=spawn"}, 4, false),
		pyCase(tr("test_launch_run_path"), []string{"--run-path", "--nnodes=1", "--nproc-per-node=4", "--monitor-interval=1", "--start-method=spawn"}, 4, false),
		agentsCase(tr("test_launch_elastic_multiple_agents"), 8, false, multi, multi),
		{from: tr("test_min_max_nodes_parse"), body: minMaxCase},
		{from: tr("test_is_torchelastic_launched"), torch: true, body: isTECase("--run-path", "--out-file")},
		{from: tr("test_is_torchelastic_launched_with_logs_spec_defined"), torch: true, body: isTECase("--run-path", "--out-file", "--logs_specs=default")},
		{from: tr("test_logs_logs_spec_entrypoint_must_be_defined"), body: func(r *run) {
			r.refused(r.launch(nil, "--run-path", "--nnodes=1", "--nproc-per-node=1", "--monitor-interval=1", "--logs_specs=DOESNOT_EXIST", isTE))
		}},
		{from: tr("test_init_method_tcp_with_torchelastic"), torch: true, body: initCase("-", "tcp://localhost:{port}")},
		{from: tr("test_init_method_env_with_torchelastic"), torch: true, body: initCase("-", "env://")},
		{from: tr("test_capture_logs_using_default_logs_specs"), body: captureLogsCase},
		{from: torchrunSays + "worker output without --tee: as written, unprefixed", body: outputCase(false)},
		{from: torchrunSays + "worker output with --tee=3: TailLog's [default0]: prefix", body: outputCase(true)},
		{from: torchrunSays + "worker interpreter = launcher's sys.executable", torch: true, exec: true, body: interpreterCase},

		// run_test.py (torchrun 1.x: underscores, an etcd rendezvous)
		pyCase(rt("test_launch_user_script_python"), etcd1, 4, true),
		pyCase(rt("test_launch_user_script_python_caffe2_bc"), caffe2("_"), 4, false),
		bashCase(rt("test_launch_user_script_bash"), append(append([]string(nil), etcd1...), "--no_python"), 4, true),
		bashCase(rt("test_launch_user_script_default_nproc"), []string{"--nnodes=1", "--rdzv_backend=etcd", "--rdzv_endpoint={etcd}",
			"--rdzv_id={id}", "--monitor_interval=1", "--start_method=spawn", "--no_python"}, 1, true),
		{from: rt("test_launch_with_env_vars"), etcd: true, body: envVarsCase(true)},
		nprocCase(rt("test_nproc_launch_auto_configurations"), "auto", autoProcs, false, true),
		nprocCase(rt("test_nproc_launch_number_configurations"), "4", four, false, true),
		nprocCase(rt("test_nproc_launch_unknown_configurations"), "unknown", nil, false, true),
		gpuCase(rt("test_nproc_gpu_launch_configurations"), false),
		{from: rt("test_launch_elastic"), etcd: true, body: func(r *run) {
			r.ok(r.launch(nil, append(append([]string(nil), elasticEtcd...), py, "--touch_file_dir={dir}")...))
			r.touched(4)
		}},
		{from: rt("test_launch_elastic_worker_raise_exception"), etcd: true, body: failCase(append(append([]string(nil), elasticEtcd...), "--max_restarts=0"))},
		pyCase(rt("test_launch_standalone"), []string{"--nnodes=1", "--nproc_per_node=4", "--standalone", "--monitor_interval=1", "--start_method=spawn"}, 4, false),
		pyCase(rt("test_launch_run_path"), []string{"--run_path", "--nnodes=1", "--nproc_per_node=4", "--monitor_interval=1", "--start_method=spawn"}, 4, false),
		agentsCase(rt("test_launch_elastic_multiple_agents"), 8, true, multiEtcd, multiEtcd),
		{from: rt("test_min_max_nodes_parse"), body: minMaxCase},
		{from: rt("test_is_torchelastic_launched"), torch: true, body: isTECase("--run_path", "--out_file")},
		{from: rt("test_init_method_tcp_with_torchelastic"), torch: true, body: initCase("_", "tcp://localhost:{port}")},
		{from: rt("test_init_method_env_with_torchelastic"), torch: true, body: initCase("_", "env://")},

		// local_elastic_agent_test.py's entry points, under the torchrun line of the agent each test configures
		leaOne(le("test_dummy_compute_c10d"), "c10d", 2, 0, true, nil, "dummy_compute", "{out}"),
		leaOne(le("test_run_happy_function_c10d"), "c10d", 2, 0, false, nil, "happy"),
		leaOne(le("test_run_happy_function_etcd"), "etcd", 2, 0, false, nil, "happy"),
		leaOne(le("test_run_check_env_function_etcd"), "etcd", 1, 0, false, nil, "check_env"),
		leaOne(le("test_run_check_nccl_async_error_handling_env_c10d"), "c10d", 1, 0, false, []string{"TORCH_NCCL_ASYNC_ERROR_HANDLING=0"},
			"check_env_value", "TORCH_NCCL_ASYNC_ERROR_HANDLING", "0"),
		leaOne(le("test_run_check_nccl_async_error_handling_env_default_c10d"), "c10d", 1, 0, false, nil,
			"check_env_value", "TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
		leaOne(le("test_run_agent_local_watchdog_setup_enabled_c10d"), "c10d", 1, 2, false, []string{"TORCHELASTIC_TIMER_FILE=/tmp/watchdog_timer_{id}"},
			"check_present", "TORCHELASTIC_TIMER_FILE", "true"),
		leaOne(le("test_run_agent_local_watchdog_setup_disabled_c10d"), "c10d", 1, 2, false, nil, "check_present", "TORCHELASTIC_TIMER_FILE", "false"),
		leaOne(le("test_run_agent_healthcheck_setup_enabled_c10d"), "c10d", 1, 2, false, []string{"TORCHELASTIC_HEALTH_CHECK_PORT=12345"},
			"check_present", "TORCHELASTIC_HEALTH_CHECK_PORT", "true"),
		leaOne(le("test_run_agent_healthcheck_setup_disabled_c10d"), "c10d", 1, 2, false, nil, "check_present", "TORCHELASTIC_HEALTH_CHECK_PORT", "false"),
		leaOne(le("test_simple_dist_sum_c10d"), "c10d", 2, 0, true, nil, "dist_sum"),
		leaJob(le("test_run_distributed_sum_homogeneous_c10d"), "c10d", true, nil, confs("sum", 4, 4), true, "dist_sum"),
		leaJob(le("test_run_with_custom_log_lines"), "c10d", true, []string{"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE=[${role_name}-${local_rank}:${rank}]:"},
			confs("sum", 4, 4), true, "dist_sum"),
		leaJob(le("test_run_distributed_sum_heterogeneous_c10d"), "c10d", true, nil, confs("sum", 1, 2, 3), false, "dist_sum"),
		{from: le("test_run_sad_function_c10d"), torch: true, body: sadCase},
		{from: le("test_run_bipolar_function_c10d"), body: bipolarCase},
		{from: le("test_correct_rank_assignment_heterogeneous_etcd"), etcd: true, body: rolesCase(map[string][]int{"master": {8}, "trainer": {1, 2, 3, 4}, "ps": {5, 2}})},
		{from: le("test_correct_rank_assignment_homogeneous_etcd"), etcd: true, body: rolesCase(map[string][]int{"master": {1}, "trainer": {4, 4, 4, 4}, "ps": {3, 3}})},
		{from: le("test_double_agent_fault_tolerance_etcd"), torch: true, etcd: true, body: killCase("etcd", "2", true)},
		{from: le("test_no_exit_barrier_on_failure"), body: func(r *run) {
			var as []*agent
			for range 2 {
				as = append(as, r.start(nil, leaAgent("c10d", "2", 2, 0, "default", false, "", "bipolar_sleep", "20")...))
			}
			for _, a := range as {
				if r.wait(a); a.code == 0 {
					r.t.Fatalf("an agent of a failed job exited 0\n%s", a.stderr.String())
				}
			}
		}},
		{from: le("test_double_agent_elastic_c10d"), torch: true, body: killCase("c10d", "1:2", false)},
		{from: le("test_torch_rpc_c10d"), torch: true, body: rpcCase},
		{from: le("test_workers_drift_success_etcd"), etcd: true, body: driftCase(2)},
		{from: le("test_workers_drift_fail_etcd"), etcd: true, body: driftCase(4)},
		{from: le("test_rank_restart_after_failure"), torch: true, body: func(r *run) {
			r.ok(r.launch(nil, leaAgent("c10d", "1", 2, 3, "default", false, "", "fail_rank_one_once", "{out}")...))
			if o := r.outputs(); len(o) != 2 || string(o["0"]) != "[100, 100]" || string(o["1"]) != "[100, 100]" {
				r.t.Fatalf("return values %s", o)
			}
		}},
	}
}

// envVarsCase is test_launch_with_env_vars: every setting from PET_* variables; PET_MODULE=1 with PET_NO_PYTHON=1
// is refused, PET_MODULE=0 runs four workers.
func envVarsCase(etcd bool) func(r *run) {
	return func(r *run) {
		env := []string{"PET_NNODES=1", "PET_NPROC_PER_NODE=4", "PET_RDZV_ID={id}", "PET_MONITOR_INTERVAL=1", "PET_START_METHOD=spawn", "PET_NO_PYTHON=1"}
		if etcd {
			env = append(env, "PET_RDZV_BACKEND=etcd", "PET_RDZV_ENDPOINT={etcd}")
		}
		r.refused(r.launch(append(env, "PET_MODULE=1"), sh, "{dir}"))
		r.ok(r.launch(append(env, "PET_MODULE=0"), sh, "{dir}"))
		r.touched(4)
	}
}

// gpuCase is test_nproc_gpu_launch_configurations: on a host with three GPUs, auto and gpu mean three workers. On
// the CPU host (the test mocks CUDA) torchrun's gpu raises "Cuda is not available": tpurun refuses it too.
func gpuCase(from string, dashes bool) portCase {
	return portCase{from: from, etcd: !dashes, perHost: true, body: func(r *run) {
		for _, v := range []string{"auto", "gpu"} {
			_ = os.RemoveAll(r.dir)
			must(r.t, os.Mkdir(r.dir, 0o755))
			c := nprocCase(from, v, func(h host) int { return h.gpus }, dashes, !dashes)
			if r.host.gpus == 0 {
				if v == "auto" {
					continue
				}
				c = nprocCase(from, v, nil, dashes, !dashes)
			}
			c.body(r)
		}
	}}
}

// failCase is test_launch_elastic_worker_raise_exception: every worker raises; the launcher fails (torchrun:
// ChildFailedError, exit 1; tpurun: the worker's code, 1).
func failCase(args []string) func(r *run) {
	return func(r *run) {
		a := r.launch(nil, append(append([]string(nil), args...), py, "--fail")...)
		if a.code != 1 || !strings.Contains(a.stderr.String(), "raising exception since --fail flag was set") {
			r.t.Fatalf("exit %d, want 1 with the worker's exception\n%s", a.code, a.stderr.String())
		}
	}
}

// minMaxCase is test_min_max_nodes_parse through the command line: --nnodes 1 and 2:20 parse, 2:20:30 is refused.
func minMaxCase(r *run) {
	r.refused(r.launch(nil, "--nnodes=2:20:30", "--nproc-per-node=1", "--no-python", sh, "{dir}"))
	r.refused(r.launch(nil, "--nnodes=2:1", "--nproc-per-node=1", "--no-python", sh, "{dir}"))
	r.ok(r.launch(nil, "--nnodes=1", "--nproc-per-node=1", "--no-python", sh, "{dir}"))
	r.touched(1)
}

// isTECase is test_is_torchelastic_launched: the worker's torch.distributed.is_torchelastic_launched() is True.
func isTECase(runPath, outFlag string, extra ...string) func(r *run) {
	return func(r *run) {
		u := runPath[5:6] // "-" or "_"
		args := append([]string{runPath, "--nnodes=1", "--nproc" + u + "per" + u + "node=1", "--monitor" + u + "interval=1"}, extra...)
		r.ok(r.launch(nil, append(args, isTE, outFlag+"={dir}/out")...))
		if b, err := os.ReadFile(filepath.Join(r.dir, "out")); err != nil || string(b) != "True" {
			r.t.Fatalf("is_torchelastic_launched() wrote %q (%v), want True", b, err)
		}
	}
}

// initCase is test_init_method_{tcp,env}_with_torchelastic: four gloo ranks initialized by init_method.
func initCase(u, method string) func(r *run) {
	return func(r *run) {
		r.ok(r.launch(nil, "--run"+u+"path", "--nnodes=1", "--nproc"+u+"per"+u+"node=4", "--master"+u+"addr=localhost",
			"--master"+u+"port={port}", "--monitor"+u+"interval=1", initM, "--init"+u+"method="+method))
	}
}

// torchrunSays names a case that holds tpurun to what torchrun does where no upstream test pins it down
// (torch.distributed.elastic.multiprocessing: a stream neither redirected nor teed is the worker's own, a teed one
// is copied to the console by TailLog after "[<role><local_rank>]:").
const torchrunSays = "torchrun's behaviour:"

// outputCase runs two shell workers with torchrun's line: each line they print reaches the console as written, or
// with --tee=3 after torchrun's prefix.
func outputCase(tee bool) func(r *run) {
	return func(r *run) {
		args := []string{"--nnodes=1", "--nproc-per-node=2", "--rdzv-id={id}", "--monitor-interval=1", "--start-method=spawn"}
		if tee {
			args = append(args, "--tee=3")
		}
		a := r.launch(nil, append(args, "--no-python", sh, "{dir}")...)
		r.ok(a)
		for i := range 2 {
			line := "creating " + filepath.Join(r.dir, strconv.Itoa(i))
			if tee {
				line = "[default" + strconv.Itoa(i) + "]:" + line
			}
			if !slices.Contains(strings.Split(a.stdout.String(), "\n"), line) {
				r.t.Fatalf("no line %q on the console:\n%s", line, a.stdout.String())
			}
		}
	}
}

// captureLogsCase is test_capture_logs_using_default_logs_specs: --redirect=3 --tee=3 with torchrun's prefix
// template shows every rank's line on the console with its prefix.
func captureLogsCase(r *run) {
	a := r.launch([]string{"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE=[rank${rank}]: "}, "--nnodes=1", "--nproc-per-node=4", "--rdzv-id={id}",
		"--redirect=3", "--tee=3", "--monitor-interval=1", "--start-method=spawn", "--no-python", sh, "{dir}")
	r.ok(a)
	for i := range 4 {
		if want := "[rank" + strconv.Itoa(i) + "]: creating "; !strings.Contains(a.stdout.String(), want) {
			r.t.Fatalf("no %q on the console:\n%s", want, a.stdout.String())
		}
	}
}

// sadCase is run_sad_function: both workers raise under @record; the launcher's own TORCHELASTIC_ERROR_FILE gets
// the first failure's record, with its message, timestamp and exit code.
func sadCase(r *run) {
	reply := filepath.Join(r.dir, "error.json")
	a := r.launch([]string{"TORCHELASTIC_ERROR_FILE=" + reply}, leaAgent("c10d", "1", 2, 0, "default", false, "", "sad")...)
	if a.code != 1 {
		r.t.Fatalf("exit %d, want 1\n%s", a.code, a.stderr.String())
	}
	b, err := os.ReadFile(reply)
	must(r.t, err)
	var doc struct {
		Message struct {
			Message   string `json:"message"`
			ErrorCode int    `json:"errorCode"`
			ExtraInfo struct {
				Timestamp string `json:"timestamp"`
			} `json:"extraInfo"`
		} `json:"message"`
	}
	must(r.t, json.Unmarshal(b, &doc))
	if _, err := strconv.Atoi(doc.Message.ExtraInfo.Timestamp); err != nil || doc.Message.Message != "RuntimeError: sad because i throw" || doc.Message.ErrorCode != 1 {
		r.t.Fatalf("the launcher's error file: %s", b)
	}
}

// bipolarCase is run_bipolar_function: odd ranks fail in every attempt; after max_restarts (2) the run fails, having
// run three attempts.
func bipolarCase(r *run) {
	a := r.launch(nil, leaAgent("c10d", "1", 4, 2, "default", false, "", "bipolar")...)
	if a.code != 1 || !strings.Contains(a.stderr.String(), "attempt 2: failure") {
		r.t.Fatalf("exit %d, want 1 after attempt 2\n%s", a.code, a.stderr.String())
	}
}

// rolesCase is correct_rank_assignment_*: agents of several roles with different worker counts; every worker's
// RANK is unique and dense, WORLD_SIZE the sum, each agent's ranks consecutive, and ROLE_RANK / ROLE_WORLD_SIZE
// count within the worker's role, as torchrun assigns them.
func rolesCase(roles map[string][]int) func(r *run) {
	return func(r *run) {
		total, nodes := 0, 0
		for _, ns := range roles {
			nodes += len(ns)
		}
		var as []*agent
		for role, ns := range roles {
			for _, n := range ns {
				total += n
				as = append(as, r.start(nil, leaAgent("etcd", strconv.Itoa(nodes), n, 0, role, false, "", "role_info", "{out}")...))
			}
		}
		for _, a := range as {
			r.wait(a)
			r.ok(a)
		}
		checkRoles(r, roles, total)
	}
}

func checkRoles(r *run, roles map[string][]int, total int) {
	byRole := map[string][]int{}
	byGroup := map[int][]int{}
	for rank, b := range r.outputs() {
		var info map[string]any
		must(r.t, json.Unmarshal(b, &info))
		role := info["ROLE_NAME"].(string)
		sum := 0
		for _, n := range roles[role] {
			sum += n
		}
		if int(info["WORLD_SIZE"].(float64)) != total || int(info["ROLE_WORLD_SIZE"].(float64)) != sum {
			r.t.Errorf("rank %s: %v, want WORLD_SIZE %d and ROLE_WORLD_SIZE %d", rank, info, total, sum)
		}
		byRole[role] = append(byRole[role], int(info["ROLE_RANK"].(float64)))
		byGroup[int(info["GROUP_RANK"].(float64))] = append(byGroup[int(info["GROUP_RANK"].(float64))], int(info["RANK"].(float64)))
	}
	for role, rr := range byRole {
		if !dense(rr) {
			r.t.Errorf("role %s has role ranks %v, want 0..%d once each", role, rr, len(rr)-1)
		}
	}
	var all []int
	for _, rr := range byGroup {
		if !consecutive(rr) {
			r.t.Errorf("an agent's ranks %v are not consecutive", rr)
		}
		all = append(all, rr...)
	}
	if len(all) != total || !dense(all) {
		r.t.Errorf("ranks %v, want 0..%d once each", all, total-1)
	}
}

func dense(xs []int) bool {
	seen := map[int]bool{}
	for _, x := range xs {
		if x < 0 || x >= len(xs) || seen[x] {
			return false
		}
		seen[x] = true
	}
	return true
}

func consecutive(xs []int) bool {
	lo, hi := xs[0], xs[0]
	for _, x := range xs {
		lo, hi = min(lo, x), max(hi, x)
	}
	return hi-lo == len(xs)-1
}

// killCase is double_agent_fault_tolerance (nnodes 2, the killed agent started again) and double_agent_elastic
// (nnodes 1:2, not started again): two agents summing over gloo with max_restarts 2, agent 1 SIGKILLed right after
// its start. The survivors (and the replacement) exit 0.
func killCase(backend, nnodes string, replace bool) func(r *run) {
	return func(r *run) {
		line := leaAgent(backend, nnodes, 2, 2, "default", false, "", "dist_sum", "2")
		a0, a1 := r.start(nil, line...), r.start(nil, line...)
		must(r.t, a1.cmd.Process.Signal(syscall.SIGKILL))
		r.wait(a1)
		if a1.code != -int(syscall.SIGKILL) {
			r.t.Fatalf("the killed agent: exit %d", a1.code)
		}
		if replace {
			a1 = r.start(nil, line...)
			r.wait(a1)
			r.ok(a1)
		}
		r.wait(a0)
		r.ok(a0)
	}
}

// rpcCase is torch_rpc: a master and a worker agent (one worker each, different roles), the master's rpc_sync to
// the worker returns the message.
func rpcCase(r *run) {
	m := r.start(nil, leaAgent("c10d", "2", 1, 0, "master", true, "true", "rpc_master", "hello world", "{out}")...)
	w := r.start(nil, leaAgent("c10d", "2", 1, 0, "worker", true, "false", "rpc_worker")...)
	for _, a := range []*agent{m, w} {
		r.wait(a)
		r.ok(a)
	}
	found := false
	for _, v := range r.outputs() {
		found = found || string(v) == `"hello world from worker"`
	}
	if !found {
		r.t.Fatalf("the master's return value: %s", r.outputs())
	}
}

// driftCase is workers_drift_{success,fail}: two agents of one worker each, the second's worker ending sec
// seconds after the first's; both succeed, each worker's value its rank.
func driftCase(sec int) func(r *run) {
	return func(r *run) {
		a0 := r.start(nil, leaAgent("etcd", "2", 1, 0, "zzz", false, "", "sleep", "0", "{out}")...)
		a1 := r.start(nil, leaAgent("etcd", "2", 1, 0, "zzz", false, "", "sleep", strconv.Itoa(sec), "{out}")...)
		for _, a := range []*agent{a0, a1} {
			r.wait(a)
			r.ok(a)
		}
		if o := r.outputs(); string(o["0"]) != "0" || string(o["1"]) != "1" {
			r.t.Fatalf("return values %s", o)
		}
	}
}

// interpreterCase: torchrun runs PROGRAM.py with its own interpreter (sys.executable), so a venv's torchrun, called
// by its path without the venv on PATH (cron, a systemd unit, a Slurm script), runs the venv's python. Here tpurun
// is installed from the wheel (make wheel) into a venv over Debian's python3 with its torch, PATH's python3 is
// another venv's, without torch, and neither PYTHON_EXEC nor --python is given: every worker must import torch
// and run with the venv's python3, the one beside the tpurun the wheel installed.
func interpreterCase(r *run) {
	_, file, _, _ := runtime.Caller(0)
	whl := testutil.Wheel(r.t, filepath.Join(filepath.Dir(file), "..", "..", ".."))
	top := r.t.TempDir()
	venv, other := filepath.Join(top, "venv"), filepath.Join(top, "other")
	testutil.InstallWheel(r.t, whl, venv, true)
	if out, err := exec.Command(torchPython, "-m", "venv", "--without-pip", other).CombinedOutput(); err != nil {
		r.t.Fatalf("a venv without torch: %v\n%s", err, out)
	}
	var env []string
	for _, kv := range r.env(nil) {
		if k, _, _ := strings.Cut(kv, "="); k != "PYTHON_EXEC" && k != "PATH" && k != "VIRTUAL_ENV" {
			env = append(env, kv)
		}
	}
	env = append(env, "PATH="+filepath.Join(other, "bin")+":/usr/bin:/bin")
	a := &agent{}
	a.cmd = exec.Command(filepath.Join(venv, "bin", "tpurun"), "--nnodes=1", "--nproc-per-node=2", "--rdzv-id="+r.id,
		"--monitor-interval=1", "--start-method=spawn", filepath.Join(r.bin, "interpreter.py"), r.dir)
	a.cmd.Env, a.cmd.Stdout, a.cmd.Stderr = env, &a.stdout, &a.stderr
	must(r.t, a.cmd.Start())
	r.wait(a)
	r.ok(a)
	r.touched(2)
	for i := range 2 {
		b, err := os.ReadFile(filepath.Join(r.dir, strconv.Itoa(i)))
		must(r.t, err)
		if want := filepath.Join(venv, "bin", "python3"); string(b) != want {
			r.t.Fatalf("rank %d ran %s, want the venv's %s (the python3 beside its tpurun)", i, b, want)
		}
	}
}
