// Package attempt owns the states of one attempt of a node's workers and how it, and then the job, ended: the
// Machine (a pure value: Phases, Events, Actions; the launcher's supervisor feeds it events and carries out the
// actions), the Cause of a stop, and the Verdict, from which the exit code, the summary line and the root cause
// derive (docs/CONTROL.md).
package attempt
