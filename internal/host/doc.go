// Package host owns this host's preparation for a run, before the first join (Prepared): detect once, discover a
// job the host's environment lays out (discover.go), plan this host, check the chips and the master port, pick the
// ports, make the run's directory (prepare.go), put the Python module on the workers' path and set up function
// mode (python.go), start the preloaded interpreter the workers are forked from (preload.go), the checks of a Spec
// that need the host (check.go); then what the job asks of the host at each join: the rendezvous opened and this
// node's Member (rendezvous.go), and the plan of the agreed world (world.go). It knows no attempt and no job.
package host
