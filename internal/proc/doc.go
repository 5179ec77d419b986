// Package proc is the operating system's side of supervision on Linux. It offers:
//
//   - starting a process as the leader of its own process group (or session) that gets SIGKILL when the thread
//     that started it dies (StartHeld, Reaper.Start), and a Process handle that signals the group without ever
//     reaching a process that reused its pid, and can hold an exited process as a zombie until released;
//   - Reaper, the one waiter of a process that is PID 1 or a child subreaper (SetSubreaper): it learns each exit
//     from a pidfd and reaps the orphans below it; AdoptHeld supervises a child forked elsewhere;
//   - Exit, how a process ended with its resource usage: the one value every layer above holds;
//   - the sweep: every descendant of this process (Reaper.Sweep, Reaper.SignalTree) or every process carrying a
//     run's variable (Sweep), killed;
//   - job control of tpurun itself (Stopper, GroupOrphaned) and ExitWithParent;
//   - the hints that name the limit to raise when a start runs out of descriptors or processes.
//
// It does not own what a worker is (the attempt hands it a prepared exec.Cmd), nor when to stop or which signal to
// send. It turns on nothing process-wide by itself: becoming a subreaper and running a Reaper (which waits for every
// child of the process, so nothing else may call exec.Cmd.Wait meanwhile) are the caller's choice.
package proc
