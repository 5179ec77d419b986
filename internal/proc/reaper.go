package proc

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// SetSubreaper makes this process the child subreaper of its descendants (prctl PR_SET_CHILD_SUBREAPER): orphans
// below it are reparented to it instead of to PID 1, so it must reap them (see Reaper).
func SetSubreaper() error { return setSubreaper(1) }

// ClearSubreaper undoes SetSubreaper: orphans below this process go to PID 1 again.
func ClearSubreaper() error { return setSubreaper(0) }

func setSubreaper(on uintptr) error {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, on, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_CHILD_SUBREAPER): %w", err)
	}
	return nil
}

// IsSubreaper reports whether this process is a child subreaper (false when the kernel cannot tell).
func IsSubreaper() bool {
	var on int32
	err := unix.Prctl(unix.PR_GET_CHILD_SUBREAPER, uintptr(unsafe.Pointer(&on)), 0, 0, 0)
	return err == nil && on != 0
}

// Reaper is the one waiter of a process that is PID 1 or a child subreaper. It forks the processes started through
// it from threads of its own (see spawner), learns each one's exit from its pidfd, in one epoll set (one event per exit,
// whatever the number of children), hands it to their onExit callbacks, and on SIGCHLD reaps every other
// (orphaned) descendant. Where the kernel gives no pidfd, it lists its children on each SIGCHLD instead.
// While a Reaper runs, nothing else in the process may wait for children: exec.Cmd.Wait would race it.
type Reaper struct {
	log     *zap.Logger
	mu      sync.Mutex
	owned   map[int]owned // started through Start, not yet reaped
	listing int           // how many of owned have no pidfd in the epoll set: their exits are found by listing
	orphans int
	listed  bool   // the kernel lists children: held workers can stay zombies while others are reaped
	buf     []byte // for reading children files (the loop's)
	exits   *exitPoll
	sigchld chan os.Signal
	reaped  chan struct{} // a token after an orphan was reaped (see Reaped)
	stop    chan struct{}
	done    chan struct{}

	// forkMu is held for reading from a fork until the child is registered in owned, and for writing while orphans
	// are reaped: a child between its fork and its registration is never taken for an orphan. Forks run at once.
	forkMu  sync.RWMutex
	spawnMu sync.Mutex
	spawn   []*spawner // the forking threads, started as starts need them (spawners)
	socks   [][2]int   // a socket pair per forking thread, made as it starts: spawn[k] has socks[k]
	noSpawn bool       // no forking thread could be started: children fork on the caller's thread
	closed  bool
	keep    []int // the runtime's descriptors, which the forking threads' tables keep (runtimeFDs)
	nullMu  sync.Mutex
	devnull *os.File // the stdio of children that have none, shared; opened on first use
}

// watch is how the reaper learns the exit of a process started through it.
type watch uint8

const (
	watchPending watch = iota // just forked, its pidfd not in the epoll set yet: nothing touches it until it is
	watchPolled               // its pidfd is in the epoll set: its exit is one event
	watchListed               // no pidfd: the SIGCHLD loop finds its exit by listing the children
)

// NewReaper starts the reaping loop. Call Close when no more children will be started.
func NewReaper(log *zap.Logger) *Reaper {
	if log == nil {
		log = zap.NewNop()
	}
	r := &Reaper{log: log, owned: map[int]owned{}, sigchld: make(chan os.Signal, 1), reaped: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{}), buf: make([]byte, 4096)}
	me := strconv.Itoa(self())
	_, err := os.Stat("/proc/" + me + "/task/" + me + "/children")
	r.listed = err == nil
	if e, err := newExitPoll(); err == nil {
		r.exits = e
		go r.pollExits()
	} else {
		log.Debug("no epoll set for pidfds: exits are found by listing the children", zap.Error(err))
	}
	// The forking threads' tables keep the network poller's descriptors: the poller must exist before them.
	if pr, pw, err := os.Pipe(); err == nil {
		_, _ = pr.Close(), pw.Close()
	}
	r.keep = runtimeFDs()
	// The first forking thread (its socket pair among the process's first descriptors) sets itself up while the
	// caller prepares its first start; the others start, each with its pair, as starts need them (spawners).
	r.spawners(1)
	signal.Notify(r.sigchld, syscall.SIGCHLD)
	go r.loop()
	return r
}

func (r *Reaper) loop() {
	defer close(r.done)
	tick := time.NewTicker(time.Second) // a safety net: SIGCHLD notifications coalesce
	defer tick.Stop()
	for {
		r.reap(false)
		select {
		case <-r.sigchld:
		case <-tick.C:
			r.reap(true)
		case <-r.stop:
			r.reap(true)
			return
		}
	}
}

// reap collects every orphan that has exited by now, and, for the owned processes without a pidfd, delivers or
// reaps them (reapListed). full also lists the children of every thread, not only those orphans go to. No fork is
// under way meanwhile (forkMu): every child it finds unregistered is an orphan.
func (r *Reaper) reap(full bool) {
	r.forkMu.Lock()
	defer r.forkMu.Unlock()
	r.mu.Lock()
	listing := r.listing
	r.mu.Unlock()
	switch {
	case r.exits == nil || listing > 0 && r.listed:
		r.reapAll()
	case !r.reapOrphans() || !r.listed:
	case full:
		kids, _ := children("/proc", self(), &r.buf)
		r.reapOrphansIn(kids)
	default:
		r.reapOrphansIn(r.leaderChildren())
	}
}

// reapAll is the reaping round of a reaper that lists its children to find the owned exits: every child that
// has exited by now is collected, except held workers (see StartHeld), whose exit it delivers but which it reaps
// only once released. Holding needs the kernel's list of children (a held zombie would hide every other exited
// child from wait4(-1)); without it every child is reaped at once.
func (r *Reaper) reapAll() {
	if r.listed && r.reapListed() {
		return
	}
	for r.reapPID(-1) {
	}
}

// reapOrphans reaps the orphans that waitid(P_ALL, WNOWAIT) finds exited, one after the other, until it finds none
// (false) or finds a process started through this reaper (true): the exit of that one is its pidfd's to report,
// and it hides any other zombie behind it, which only a list of the children shows.
func (r *Reaper) reapOrphans() (hidden bool) {
	for range 1 << 12 {
		var info unix.Siginfo
		err := waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil || info.Signo == 0 {
			return false // no child, or none exited
		}
		pid, _, _ := childExit(&info)
		if r.reapOrphan(pid) == orphanOwned {
			return true
		}
	}
	return true
}

// reapOrphansIn reaps every exited orphan among pids (children of this process); the owned ones are skipped
// without a system call.
func (r *Reaper) reapOrphansIn(pids []int) {
	for _, pid := range pids {
		r.reapOrphan(pid)
	}
}

// orphanResult is what reapOrphan found.
type orphanResult uint8

const (
	orphanNone   orphanResult = iota // not exited, or not a child
	orphanReaped                     // an orphan, reaped
	orphanOwned                      // started through the reaper: left alone
)

// reapOrphan reaps pid if it is an exited child that was not started through the reaper, holding the lock from
// the check to the reap, so that the pid cannot meanwhile become a new owned child's.
func (r *Reaper) reapOrphan(pid int) orphanResult {
	r.mu.Lock()
	if _, ok := r.owned[pid]; ok {
		r.mu.Unlock()
		return orphanOwned
	}
	var ws syscall.WaitStatus
	got, err := wait4(pid, &ws, syscall.WNOHANG, nil)
	for errors.Is(err, syscall.EINTR) {
		got, err = wait4(pid, &ws, syscall.WNOHANG, nil)
	}
	if err != nil || got <= 0 {
		r.mu.Unlock()
		return orphanNone
	}
	r.orphans++
	r.mu.Unlock()
	r.orphanReaped(got, ws)
	return orphanReaped
}

func (r *Reaper) orphanReaped(pid int, ws syscall.WaitStatus) {
	r.log.Debug("reaped orphan", zap.Int("pid", pid), zap.Int("status", int(ws)))
	select {
	case r.reaped <- struct{}{}:
	default: // one pending token says it all: the subtree changed
	}
}

// leaderChildren are the children of this process's first thread: where the kernel re-parents orphans (to the
// first live thread of the subreaper, or of PID 1). The processes started through the reaper are the forking
// thread's children, not its: the list stays as short as the orphans are few.
func (r *Reaper) leaderChildren() []int {
	me := strconv.Itoa(self())
	var b []byte
	b, r.buf = readSmall("/proc/"+me+"/task/"+me+"/children", r.buf)
	var kids []int
	for f := range strings.FieldsSeq(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			kids = append(kids, pid)
		}
	}
	return kids
}

// reapListed goes through this process's children: an exited held worker has its exit delivered and stays a
// zombie until released; every other exited child is reaped. It reports false when the children cannot be listed.
func (r *Reaper) reapListed() bool {
	kids, ok := children("/proc", self(), &r.buf)
	if !ok {
		return false
	}
	for _, pid := range kids {
		var info unix.Siginfo
		if err := waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT); err != nil || info.Signo == 0 {
			continue // running, or not ours to wait for
		}
		r.mu.Lock()
		o, owned := r.owned[pid]
		if owned && o.watch == watchPending {
			r.mu.Unlock()
			continue // its starter is still setting it up
		}
		held := owned && o.p.hold && !closed(o.p.release)
		deliver := held && !o.seen
		if deliver {
			o.seen = true
			r.owned[pid] = o
		}
		r.mu.Unlock()
		if deliver {
			_, code, sig := childExit(&info)
			o.p.setExited(Exit{PID: pid, ExitCode: code, Signal: sig})
		}
		if !held {
			r.reapPID(pid)
		}
	}
	return true
}

// polled takes the event of one owned process's pidfd: an exit is delivered (held: the process stays a zombie
// until released) or reaped.
func (r *Reaper) polled(pid int) {
	r.mu.Lock()
	o, ok := r.owned[pid]
	if !ok || o.watch != watchPolled {
		r.mu.Unlock()
		return
	}
	var info unix.Siginfo
	err := waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT)
	for errors.Is(err, syscall.EINTR) {
		err = waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT)
	}
	if err != nil || info.Signo == 0 { // not exited (or unreadable): watch again, or leave it to the listing
		if err != nil || r.exits.rearm(o.p.pidfd, pid) != nil {
			o.watch = watchListed
			r.owned[pid] = o
			r.listing++
		}
		r.mu.Unlock()
		return
	}
	if o.p.hold && !closed(o.p.release) {
		deliver := !o.seen
		o.seen = true
		r.owned[pid] = o
		r.mu.Unlock()
		if deliver {
			_, code, sig := childExit(&info)
			o.p.setExited(Exit{PID: pid, ExitCode: code, Signal: sig})
		}
		return
	}
	r.mu.Unlock()
	r.reapPID(pid)
}

// reapPID reaps pid (-1: any child) if it has exited, and delivers its exit or counts an orphan; it reports
// whether a child was reaped. It holds the reaper's lock across the wait, and Signal takes it too, so no signal
// to a worker's group races its pid being freed. The exit is delivered on the calling goroutine.
func (r *Reaper) reapPID(pid int) bool {
	r.mu.Lock()
	if o, ok := r.owned[pid]; ok && o.watch == watchPending {
		r.mu.Unlock()
		return false
	}
	var ws syscall.WaitStatus
	var ru syscall.Rusage
	got, err := wait4(pid, &ws, syscall.WNOHANG, &ru)
	for errors.Is(err, syscall.EINTR) {
		got, err = wait4(pid, &ws, syscall.WNOHANG, &ru)
	}
	if err != nil || got <= 0 {
		r.mu.Unlock()
		return false // ECHILD: no such child; 0: not exited yet
	}
	o, ok := r.owned[got]
	if ok {
		o.p.mu.Lock()
		o.p.reapedLocked()
		o.p.mu.Unlock()
		delete(r.owned, got)
		if o.watch == watchListed {
			r.listing--
		}
	} else {
		r.orphans++
	}
	r.mu.Unlock()
	if !ok {
		r.orphanReaped(got, ws)
		return true
	}
	e := Exit{PID: got, ExitCode: ws.ExitStatus()}
	if ws.Signaled() {
		e.Signal, e.ExitCode = ws.Signal(), -1
	}
	e.MaxRSS = ru.Maxrss * 1024
	e.UserCPU = time.Duration(ru.Utime.Nano())
	e.SysCPU = time.Duration(ru.Stime.Nano())
	if o.p.cmd != nil && o.p.cmd.Process != nil { // nil: forked by the reaper, or adopted
		_ = o.p.cmd.Process.Release() // nobody will Wait: free Go's handle
	}
	o.p.finish(e)
	return true
}

// reapReleased reaps a released held worker that has exited (one still running is reaped when it exits).
func (r *Reaper) reapReleased(p *Process) {
	r.reapPID(p.pid)
}

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// Start is proc.Start for a process whose exit this reaper delivers: the same process group, Pdeathsig and
// onExit contract, but no cmd.Wait, and cmd.Process is not set (the *Process is the handle). cmd's Stdout, Stderr
// and Stdin must be nil or *os.File (no copying goroutines, since nobody calls Wait to finish them). onExit is
// called on the reaper's goroutine: it must not block.
func (r *Reaper) Start(cmd *exec.Cmd, onExit func(*Process)) (*Process, error) {
	ps, err := r.startAll([]*exec.Cmd{cmd}, []func(*Process){onExit}, false, nil)
	if err != nil {
		return nil, errors.Unwrap(err) // the command's own error: its index says nothing
	}
	return ps[0], nil
}

// StartHeldAll starts cmds, each as StartHeld would with its onExit (onExit[i], nil or absent: none), until one
// cannot be started or more (when not nil) returns false. Through a reaper the whole list is forked in one go by
// its forking threads, several at once: ps has one entry per command, its process or nil where it was not
// started, and err, when not nil, is a *StartError naming the command whose start failed. Once one failed, or
// more said no, the threads start no more: commands before it in the list may not have started either, and some
// after it may have (on another thread). Without a reaper they start one by one, in order.
func StartHeldAll(rp *Reaper, cmds []*exec.Cmd, onExit []func(*Process), more func() bool) (ps []*Process, err error) {
	if rp != nil {
		return rp.startAll(cmds, onExit, true, more)
	}
	ps = make([]*Process, len(cmds))
	for i, cmd := range cmds {
		if more != nil && !more() {
			break
		}
		p, err := startOwn(cmd, at(onExit, i), true)
		if err != nil {
			return ps, &StartError{Index: i, Err: err}
		}
		ps[i] = p
	}
	return ps, nil
}

// StartError is StartHeldAll's error: the command at Index could not be started (the first in the list, if several
// could not), and why.
type StartError struct {
	Index int
	Err   error
}

func (e *StartError) Error() string { return e.Err.Error() }

func (e *StartError) Unwrap() error { return e.Err }

func at(fs []func(*Process), i int) func(*Process) {
	if i < len(fs) {
		return fs[i]
	}
	return nil
}

// forkThreads is how many threads fork a reaper's children: a fork waits until its child has exec'd (vfork), so
// one thread forks at most one child at a time; several keep the cores busy.
func forkThreads() int { return min(max(runtime.GOMAXPROCS(0), 1), 8) }

// childrenPerThread is how many children of one start a forking thread is started for: a thread forks one child at
// a time (until it has exec'd), but each one started keeps a socket open in the process's descriptor table, and a
// start of 8 workers that needed 16 more descriptors than the table's first 64 waited for it to grow (an RCU grace
// period, 30-40 ms on a 16-core host: see ReserveFDsAhead).
const childrenPerThread = 4

// startAll starts cmds through the forking threads; see StartHeldAll.
func (r *Reaper) startAll(cmds []*exec.Cmd, onExit []func(*Process), hold bool, more func() bool) ([]*Process, error) {
	devnull, err := r.nullFile()
	if err != nil {
		return make([]*Process, len(cmds)), &StartError{Err: err}
	}
	all, bad := plan(cmds, devnull)
	ps := make([]*Process, len(cmds))
	var failed atomic.Bool // a fork failed: the threads fork no more
	keepOn := func() bool { return !failed.Load() && (more == nil || more()) }
	fork := func(b *batch) func(i int, fork func() (int, error)) error {
		return func(i int, fork func() (int, error)) error {
			r.forkMu.RLock() // until the child is registered: it is not an orphan
			defer r.forkMu.RUnlock()
			start := time.Now()
			pid, err := fork()
			if err != nil {
				failed.Store(true)
				return err
			}
			k := b.idx[i]
			p := newProcess(cmds[k], pid, start, hold, at(onExit, k))
			p.rp = r
			r.mu.Lock()
			r.owned[pid] = owned{p: p, watch: watchPending}
			r.mu.Unlock()
			ps[k] = p
			return nil
		}
	}
	spawn, ok := r.spawners(len(all.cmds))
	if !ok {
		return ps, &StartError{Err: fmt.Errorf("%w: the reaper is closed", ErrNotStarted)}
	}
	parts := all.split(max(len(spawn), 1))
	for _, b := range parts {
		b.more, b.fork = keepOn, fork(b)
	}
	r.run(spawn, parts)
	for _, p := range ps {
		if p != nil {
			r.watch(p)
		}
	}
	return ps, startError(parts, ps[:len(all.cmds)], bad)
}

// spawners are the forking threads for a start of n children: one per childrenPerThread of them, up to one per
// core (forkThreads), each started on first need and kept until Close (a run of a few workers does not start, and
// end, a thread per core; NewReaper starts the first). None when the first could not be started. ok is false once
// the reaper is closed.
func (r *Reaper) spawners(n int) (spawn []*spawner, ok bool) {
	r.spawnMu.Lock()
	defer r.spawnMu.Unlock()
	if r.closed {
		return nil, false
	}
	want := min(max((n+childrenPerThread-1)/childrenPerThread, 1), forkThreads())
	for !r.noSpawn && len(r.spawn) < want {
		if len(r.socks) == len(r.spawn) {
			fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				r.noThread(err)
				break
			}
			r.socks = append(r.socks, [2]int{fds[0], fds[1]})
		}
		sp, err := startSpawner(r.socks[len(r.spawn)], r.keep)
		if err != nil {
			r.noThread(err)
			break
		}
		r.spawn = append(r.spawn, sp)
	}
	return r.spawn[:min(len(r.spawn), want)], true
}

// noThread says why a forking thread could not be started: at Warn, and for good, when it would have been the
// first (children fork on the caller's thread then); a further one is only fewer threads, tried again next start.
func (r *Reaper) noThread(err error) {
	if len(r.spawn) == 0 {
		r.log.Warn("no forking thread: children are forked from the starting threads", zap.Error(err))
		r.noSpawn = true
		return
	}
	r.log.Debug("fewer forking threads", zap.Error(err))
}

// run runs each part on a forking thread of its own (spawn[k] for parts[k]), at once, and returns when all are done.
func (r *Reaper) run(spawn []*spawner, parts []*batch) {
	if len(spawn) == 0 {
		r.forkHere(parts[0])
		return
	}
	var wg sync.WaitGroup
	for k, b := range parts[1:] {
		wg.Go(func() { spawn[k+1].start(b) })
	}
	spawn[0].start(parts[0])
	wg.Wait()
}

// startError is the error of a start in parts: the failure of the lowest index, else bad (why the command after
// the planned ones, ps, could not be planned) when all of those started.
func startError(parts []*batch, ps []*Process, bad error) error {
	first := -1
	var why error
	for _, b := range parts {
		if b.err != nil && (first < 0 || b.failed < first) {
			first, why = b.failed, b.err
		}
	}
	if why == nil && bad != nil && !slices.Contains(ps, nil) {
		first, why = len(ps), bad
	}
	if why == nil {
		return nil
	}
	return &StartError{Index: first, Err: why}
}

// plan is the batch of cmds up to the first that cannot be started (bad says why): each one's files (the shared
// table's descriptors it gets as 0, 1, 2, ...: devnull for a nil stdio), terminal and environment.
func plan(cmds []*exec.Cmd, devnull *os.File) (b *batch, bad error) {
	b = &batch{}
	for i, cmd := range cmds {
		if bad = checkCmd(cmd); bad != nil {
			break
		}
		files, err := childFiles(cmd, devnull)
		if err != nil {
			bad = err
			break
		}
		prepare(cmd)
		ctty := -1
		if cmd.SysProcAttr.Foreground {
			ctty = cmd.SysProcAttr.Ctty
		}
		b.add(i, cmd, files, ctty, environ(cmd))
	}
	return b, bad
}

// forkHere runs b on the calling thread, locked while it forks each child (the kernel ties the parent-death signal
// to the thread that forked): without a forking thread.
func (r *Reaper) forkHere(b *batch) {
	shared := &spawner{}
	runtimeLocked(func() { shared.run(b, -1) })
}

// checkCmd refuses what exec.Cmd.Start would refuse before forking.
func checkCmd(cmd *exec.Cmd) error {
	if cmd.Err != nil {
		return fmt.Errorf("%w: %s: %w", ErrNotStarted, cmd.Path, cmd.Err)
	}
	if cmd.Path == "" {
		return fmt.Errorf("%w: exec: no command", ErrNotStarted)
	}
	return nil
}

// nullFile is the /dev/null the children without stdio share, opened on first use. An open that fails (out of
// descriptors: EMFILE, which the caller names the limit of) fails this start only: the next one tries again.
func (r *Reaper) nullFile() (*os.File, error) {
	r.nullMu.Lock()
	defer r.nullMu.Unlock()
	if r.devnull == nil {
		f, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
		if err != nil {
			return nil, fmt.Errorf("%w: no %s for the children's stdio: %w", ErrNotStarted, os.DevNull, err)
		}
		r.devnull = f
	}
	return r.devnull, nil
}

// watch puts a process just forked through the reaper under watch: its pidfd (opened now, in the process's shared
// table: the forking thread's copy would be out of reach) into the epoll set, or, without one, the SIGCHLD
// loop's listing. Nothing reaps a pending process but the loop's wait4(-1), when it cannot list the children (out
// of descriptors): one reaped so is done, its exit delivered, and is not watched (the pid may be another's by now).
func (r *Reaper) watch(p *Process) {
	fd, err := pidfdOpen(p.pid, 0)
	r.mu.Lock()
	o, ok := r.owned[p.pid]
	if !ok || o.p != p {
		r.mu.Unlock()
		if err == nil {
			_ = unix.Close(fd)
		}
		return
	}
	o.watch = watchListed
	if err == nil {
		p.mu.Lock()
		p.pidfd = fd
		p.mu.Unlock()
		if r.exits != nil {
			o.watch = watchPolled // before the epoll set has it: its event may come at once
		}
	}
	if o.watch == watchPolled {
		r.owned[p.pid] = o
		r.mu.Unlock()
		if err := r.exits.add(fd, p.pid); err == nil {
			return
		}
		r.mu.Lock()
		o = r.owned[p.pid]
		if o.p != p || o.watch != watchPolled {
			r.mu.Unlock()
			return
		}
		o.watch = watchListed
	}
	r.owned[p.pid] = o
	r.listing++
	r.mu.Unlock()
	select { // it may have exited already: let the loop list the children now
	case r.sigchld <- syscall.SIGCHLD:
	default:
	}
}

// Reaped has a token whenever an orphaned descendant has been reaped since the last one was taken: a wait for a
// subtree to empty re-checks it then, instead of polling.
func (r *Reaper) Reaped() <-chan struct{} { return r.reaped }

// Orphans is how many processes not started through Start this reaper has reaped.
func (r *Reaper) Orphans() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.orphans
}

// Sweep kills every descendant of this process (SweepTree from this pid) and lets the loop reap them: with the
// reaper on, this process is PID 1 or a child subreaper, so every orphan below it is still in its subtree. It
// kills every child of the process, so one process runs one launch at a time under a reaper. The pids it
// returns exclude the children started through Start (the workers, already killed with their group). A process
// marked with Keep is left alive, and its descendants are killed. A kernel without /proc/<pid>/task/<tid>/children
// gives ErrNoChildrenFile: fall back to Sweep.
func (r *Reaper) Sweep(procRoot string) ([]int, error) {
	return sweepTree(procRoot, self(), func(pid int) (report, kill bool) {
		r.mu.Lock()
		defer r.mu.Unlock()
		o, ok := r.owned[pid]
		return !ok, !o.keep
	}, r.exited, 5*time.Second)
}

// SignalTree is proc.SignalTree from this process, but that the processes started through the reaper that have
// exited (held zombies, their exit delivered) are not looked at: the walk costs what the live subtree holds.
func (r *Reaper) SignalTree(procRoot string, skip func(pid int) bool, sig syscall.Signal) ([]int, error) {
	return signalTree(procRoot, self(), skip, r.exited, sig)
}

// LiveDescendants is proc.LiveDescendantsExcept from this process, but that the processes started through the
// reaper that have exited are not looked at (see SignalTree).
func (r *Reaper) LiveDescendants(procRoot string, skip func(pid int) bool) int {
	return liveDescendants(procRoot, self(), skip, r.exited)
}

// exited reports whether pid is a process started through the reaper whose exit was delivered and that is held
// unreaped: a zombie.
func (r *Reaper) exited(pid int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.owned[pid].seen
}

// Close stops the loop after a last reaping round. Children started through Start that are still running will
// never be delivered: Close only after every one of them is done. It ends the forking threads, each the
// parent-death thread of the children it forked: any still running get their Pdeathsig (SIGKILL).
func (r *Reaper) Close() {
	signal.Stop(r.sigchld)
	close(r.stop)
	<-r.done
	if r.exits != nil {
		r.exits.close(r)
	}
	r.spawnMu.Lock()
	for _, sp := range r.spawn {
		sp.close()
	}
	for _, fds := range r.socks[len(r.spawn):] { // those of threads never started
		_, _ = unix.Close(fds[0]), unix.Close(fds[1])
	}
	r.spawn, r.socks, r.closed = nil, nil, true // a start after Close is refused
	r.spawnMu.Unlock()
	r.nullMu.Lock()
	if r.devnull != nil {
		_ = r.devnull.Close()
		r.devnull = nil
	}
	r.nullMu.Unlock()
	if n := r.Orphans(); n > 0 {
		r.log.Info("reaped orphaned processes", zap.Int("count", n))
	}
}

// StartWith starts cmd through rp when rp is not nil, else through the package-level Start (cmd.Wait).
func StartWith(rp *Reaper, cmd *exec.Cmd, onExit func(*Process)) (*Process, error) {
	if rp == nil {
		return Start(cmd, onExit)
	}
	return rp.Start(cmd, onExit)
}

type owned struct {
	p     *Process
	seen  bool // a held process whose exit was delivered
	keep  bool // left alive by Sweep (see Keep)
	watch watch
}

// The system calls the reaper waits with: variables, so that a test can count them.
var (
	waitid = func(idType, id int, info *unix.Siginfo, options int) error {
		return unix.Waitid(idType, id, info, options, nil)
	}
	wait4        = syscall.Wait4
	pidfdOpen    = unix.PidfdOpen
	startSpawner = newSpawner
)

// exitPoll is the epoll set of the pidfds of the processes started through a Reaper. A pidfd becomes readable once
// its process has exited, so each exit is one event, delivered once (EPOLLONESHOT), with the pid as its data: no
// list of every child on each SIGCHLD, no waitid on each. The set itself waits in Go's poller, so no thread is
// held while nothing exits.
type exitPoll struct {
	f    *os.File // the epoll descriptor
	fd   int
	done chan struct{} // closed when the polling goroutine returned
}

func newExitPoll() (*exitPoll, error) {
	fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		_ = unix.Close(fd)
		return nil, err
	}
	return &exitPoll{f: os.NewFile(uintptr(fd), "pidfds"), fd: fd, done: make(chan struct{})}, nil
}

// add watches pidfd, the pidfd of pid, for its exit.
func (e *exitPoll) add(pidfd, pid int) error {
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLONESHOT, Fd: int32(pid)}
	return unix.EpollCtl(e.fd, unix.EPOLL_CTL_ADD, pidfd, &ev)
}

// rearm watches pidfd again after an event that was not its exit.
func (e *exitPoll) rearm(pidfd, pid int) error {
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLONESHOT, Fd: int32(pid)}
	return unix.EpollCtl(e.fd, unix.EPOLL_CTL_MOD, pidfd, &ev)
}

// pollExits is the goroutine that waits for the epoll set to have events and takes them, until the set is closed.
func (r *Reaper) pollExits() {
	defer close(r.exits.done)
	rc, err := r.exits.f.SyscallConn()
	if err != nil {
		return
	}
	events := make([]unix.EpollEvent, 64)
	_ = rc.Read(func(fd uintptr) bool {
		r.drainExits(int(fd), events)
		return false // wait for the next event; ends when the set is closed
	})
}

// drainExits takes every event of the epoll set fd until it has none: the set is waited on edge-triggered.
func (r *Reaper) drainExits(fd int, events []unix.EpollEvent) {
	for {
		n, err := unix.EpollWait(fd, events, 0)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil || n <= 0 {
			return
		}
		for _, ev := range events[:n] {
			r.polled(int(ev.Fd))
		}
	}
}

// close takes the last events and stops the polling goroutine.
func (e *exitPoll) close(r *Reaper) {
	r.drainExits(e.fd, make([]unix.EpollEvent, 64))
	_ = e.f.Close()
	<-e.done
}
