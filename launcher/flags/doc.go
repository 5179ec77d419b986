// Package flags owns tpurun's command line below cmd: it registers the flags that tpurun's commands share (run,
// plan and doctor) — which devices to use and how to split them, in tpurun's and torchrun's spellings — and turns
// them into what detection and planning take (topology.Options, topology.Request), and it parses the values of
// torchrun's and tpurun's other flags (the Python command line, node counts, stream selectors, rank lists, signal
// and module lists) into what a launcher.Spec takes. A run leaves detection to the launcher (once per run);
// DetectPlan detects for `tpurun plan`.
package flags
