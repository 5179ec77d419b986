// Package launcher is tpurun's public API: Run takes a Spec and runs the job on this host alone or as one node of a
// multi-host world, and returns its Report; Observers learn of its progress as Events. It is a facade: the names
// are aliases of the internal packages that do the work, along the run —
//
//   - internal/spec: the Spec with its defaults and checks, the Report, the Observer's Events;
//   - internal/job: the job: its generations (join, plan, barrier, one attempt, collect, agree on the outcome), the
//     restarts, the report and its root cause;
//   - internal/host: this host's preparation before the first join: detection once, the plan, the ports, the run's
//     directory, the Python path, the preloaded interpreter, the rendezvous opened;
//   - internal/attempt: one attempt of this node's workers: the stop controller (the only reader of signals and
//     timers, docs/CONTROL.md), the Machine of its phases and the supervisor that carries out its actions, the
//     start, the sweep, the terminal, the signal policy, the sampler, the reaper; the Verdict of how it ended.
//
// Below them: the errors (failure) and their codes (exitcode), the consoles (console), the workers' environment
// (workerenv), detection and planning (topology), processes (proc), the result contract (results), --preload
// (preload). Above: the command line (cmd/tpurun), its summaries and status endpoint.
package launcher
