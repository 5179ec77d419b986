// Package host makes this host ready for a run, before the first join (Prepared): it detects once, discovers a job
// the host's environment lays out, plans this host, checks the chips and the master port, picks the ports, makes
// the run's directory, puts the Python module on the workers' path, sets up function mode and starts the preloaded
// interpreter (package preload); it holds the checks of a Spec that need the host (CheckOutputs, CheckMasterAddr).
// At each join it gives the job what it asks of the host: the rendezvous opened (OpenRendezvous), this node's
// Member and the plan of the agreed World.
//
// It knows no attempt and no job: detection and planning are package topology's, the workers' environment package
// workerenv's, the rendezvous protocol package rendezvous's and its backends'.
package host
