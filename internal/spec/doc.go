// Package spec owns what a caller of the launcher gives and gets: the Spec of a job (with its option structs, its
// defaults and the checks that need no host), the Report of a run, and the Observer's Events. The job, the host's
// preparation and the public facade (package launcher, which aliases these names) share it; it knows no process.
package spec
