package proc

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// spawner forks children of a Reaper from one OS thread that has a file descriptor table of its own (a Reaper has
// up to one per core, up to 8, started as starts need them: a fork waits until its child has exec'd, so one thread
// forks one child at a time). fork
// copies the forking thread's table into the child and exec then closes every close-on-exec entry of it: forked
// from the launcher's own table, which holds a few descriptors per running worker (its pipes and its pidfd), each
// start would cost O(workers) in the kernel and a launch O(N²). The thread's table holds the socket it receives
// the children's files on (SCM_RIGHTS) and, for one batch, those files. The thread is also the parent-death thread
// (Pdeathsig) of every child it forks, and the parent in whose list of children they stay (orphans re-parented to
// this process go to its first thread instead; see Reaper.reapOrphans): it lives until the Reaper is closed.
//
// Where the kernel cannot give the thread a table of its own (close_range without CLOSE_RANGE_UNSHARE, before
// Linux 5.9, or a seccomp filter refusing it) the thread forks from the shared table, as any thread would.
type spawner struct {
	// mu is held by a start from the sending of its descriptors until the thread is done with its batch: the
	// thread takes each batch's descriptors off the socket in the order the batches reach it, so two starts
	// interleaved (two jobs in one process, sharing its reaper) gave one batch's children the other's stdio.
	mu    sync.Mutex
	reqs  chan *batch
	ready chan struct{} // closed once the thread is set up: the fields below are set then
	done  chan struct{}

	sock    int // the launcher's end of the socket pair the files travel on; -1 when the table is shared
	theirs  int // the thread's end, in the process's table until dropTheirs
	dropped sync.Once
	private bool // the thread's table is its own
	tid     int
}

// batch is one request to a forking thread: start cmds in order, until one fails or more says no.
type batch struct {
	cmds   []*exec.Cmd
	idx    []int        // per command: its index in the caller's list
	files  [][]int      // per command: the shared table's descriptors that become its 0, 1, 2, ... (-1: closed)
	ctty   []int        // per command: the shared table's terminal for SysProcAttr.Foreground, -1 when unset
	env    [][]string   // per command: its environment
	sent   []int        // the distinct descriptors of files and ctty, in the order they were sent to the thread
	inSet  map[int]bool // sent, as a set
	more   func() bool
	fork   func(i int, start func() (int, error)) error // runs start (the fork) and registers the child
	n      int                                          // how many were started
	err    error                                        // why cmds[n] was not
	failed int                                          // the caller's index of cmds[n] when err is set
	done   chan struct{}
}

// add puts one command in b.
func (b *batch) add(i int, cmd *exec.Cmd, files []int, ctty int, env []string) {
	if b.inSet == nil {
		b.inSet = map[int]bool{}
	}
	send := func(fd int) {
		if fd >= 0 && !b.inSet[fd] {
			b.inSet[fd] = true
			b.sent = append(b.sent, fd)
		}
	}
	for _, fd := range files {
		send(fd)
	}
	send(ctty)
	b.cmds, b.idx = append(b.cmds, cmd), append(b.idx, i)
	b.files, b.ctty, b.env = append(b.files, files), append(b.ctty, ctty), append(b.env, env)
}

// split deals b's commands out to k batches, in turn, each with the descriptors of its own commands.
func (b *batch) split(k int) []*batch {
	k = max(min(k, len(b.cmds)), 1)
	if k == 1 {
		return []*batch{b}
	}
	parts := make([]*batch, k)
	for j := range parts {
		parts[j] = &batch{}
	}
	for i, cmd := range b.cmds {
		parts[i%k].add(b.idx[i], cmd, b.files[i], b.ctty[i], b.env[i])
	}
	return parts
}

// closeRange is close_range(2); a variable so that a test can take the fallback (no table of its own).
var closeRange = unix.CloseRange

// newSpawner starts a forking thread on the socket pair fds (ours, the thread's); it sets itself up meanwhile (see
// ready), keeping in its table the runtime's descriptors among keep (see runtimeFDs).
func newSpawner(fds [2]int, keep []int) (*spawner, error) {
	s := &spawner{reqs: make(chan *batch), sock: fds[0], theirs: fds[1], ready: make(chan struct{}), done: make(chan struct{})}
	go s.thread(fds[1], keep)
	return s, nil
}

// dropTheirs closes, once the thread is set up, the process's copy of the thread's end of the socket: the thread
// has its own in its own table. Not on the thread itself (its table is no longer the process's).
func (s *spawner) dropTheirs() {
	<-s.ready
	s.dropped.Do(func() {
		if s.private {
			_ = unix.Close(s.theirs)
		}
	})
}

// thread is the forking thread's goroutine. It never unlocks a thread whose table became its own: such a thread
// can never run anything else, and the runtime ends it when the goroutine returns. The process's first thread is
// not taken (re-parented orphans go to its list of children, kept short): a goroutine that finds itself there
// hands over to a new one, which cannot land there while this one holds it.
func (s *spawner) thread(theirs int, keep []int) {
	runtime.LockOSThread()
	if unix.Gettid() == unix.Getpid() {
		moved := make(chan struct{})
		go func() {
			runtime.LockOSThread()
			close(moved)
			s.serve(theirs, keep)
		}()
		<-moved
		runtime.UnlockOSThread()
		return
	}
	s.serve(theirs, keep)
}

// serve is the forking thread's loop, on its locked thread.
func (s *spawner) serve(theirs int, keep []int) {
	defer close(s.done)
	s.tid = unix.Gettid()
	if sock, err := ownTable(theirs, keep); err == nil {
		s.private, theirs = true, sock
	}
	if !s.private { // the table is the process's: no socket needed
		_, _ = unix.Close(theirs), unix.Close(s.sock)
		theirs, s.sock = -1, -1
	}
	close(s.ready)
	for b := range s.reqs {
		s.run(b, theirs)
		close(b.done)
	}
	if theirs >= 0 {
		_ = unix.Close(theirs)
	}
	if !s.private {
		runtime.UnlockOSThread() // a shared table: the thread may serve others again
	}
}

// ownTable gives the calling thread a descriptor table of its own that holds only what the thread needs: sock,
// the standard descriptors (the runtime writes a fatal error to 2), and the runtime's own, at the same numbers:
// the network poller's epoll set and its eventfd, which the runtime uses from whichever thread it runs on (the
// thread that stops the world polls the network when it starts it again). close_range with CLOSE_RANGE_UNSHARE
// copies only the descriptors below the range it closes; the others below it are closed a range at a time. It
// returns the socket's number in the new table: the lowest free one. A thread started late, when the process had
// thousands of descriptors open, got a socket numbered in the thousands, and fork sizes a child's table for the
// highest descriptor open in its parent's: every child of that thread was forked with, and kept after exec, a table
// of thousands of entries.
func ownTable(sock int, runtime []int) (int, error) {
	keep := slices.Sorted(slices.Values(append([]int{sock}, runtime...)))
	top := keep[len(keep)-1]
	if err := closeRange(uint(top)+1, ^uint(0), unix.CLOSE_RANGE_UNSHARE); err != nil {
		return sock, err
	}
	lo := 3
	for _, fd := range keep {
		if fd > lo {
			closeBetween(lo, fd-1)
		}
		lo = max(lo, fd+1)
	}
	// runtime was listed when the reaper started, perhaps long before this thread: a number in it may have been
	// closed and taken since by another file (a worker's pipe, whose end of file this copy would hold back).
	for _, fd := range runtime {
		if fd != sock && !pollerFD(fmt.Sprintf("/proc/thread-self/fd/%d", fd)) {
			_ = unix.Close(fd)
		}
	}
	if low, err := unix.FcntlInt(uintptr(sock), unix.F_DUPFD_CLOEXEC, 3); err == nil {
		if low < sock {
			_ = unix.Close(sock)
			return low, nil
		}
		_ = unix.Close(low)
	}
	return sock, nil
}

// closeBetween closes the descriptors from lo to hi of the calling thread's table; one by one where close_range
// refuses (a seccomp filter that allows it only with CLOSE_RANGE_UNSHARE, say).
func closeBetween(lo, hi int) {
	if unix.CloseRange(uint(lo), uint(hi), 0) == nil {
		return
	}
	for fd := lo; fd <= hi; fd++ {
		_ = unix.Close(fd)
	}
}

// pollerFD reports whether link (a /proc/.../fd/N) is an epoll set or an eventfd.
func pollerFD(link string) bool {
	l, err := os.Readlink(link)
	return err == nil && (l == "anon_inode:[eventpoll]" || l == "anon_inode:[eventfd]")
}

// runtimeFDs are the descriptors of this process that may be the runtime's network poller's: every epoll set and
// eventfd (anon_inode:[eventpoll], anon_inode:[eventfd] in /proc/self/fd). A few of the process's own may be among
// them: keeping them open in the forking thread's table does no harm (neither has an end of file to delay).
func runtimeFDs() []int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd <= 2 {
			continue
		}
		if pollerFD("/proc/self/fd/" + e.Name()) {
			out = append(out, fd)
		}
	}
	return out
}

// run starts b's commands on the forking thread.
func (s *spawner) run(b *batch, theirs int) {
	var mine map[int]int // shared descriptor → this thread's copy
	if s.private && len(b.sent) > 0 {
		got, err := recvFDs(theirs, len(b.sent))
		defer func() {
			for _, fd := range got {
				_ = unix.Close(fd)
			}
		}()
		if err != nil {
			b.err = fmt.Errorf("%w: passing the descriptors of %d children to the forking thread: %w", ErrNotStarted, len(b.cmds), err)
			b.failed = b.idx[0]
			return
		}
		mine = make(map[int]int, len(got))
		for i, fd := range got {
			mine[b.sent[i]] = fd
		}
	}
	local := func(fd int) int {
		if fd < 0 || mine == nil {
			return fd
		}
		return mine[fd]
	}
	for i, cmd := range b.cmds {
		if b.more != nil && !b.more() {
			return
		}
		attr := &syscall.ProcAttr{Dir: cmd.Dir, Env: b.env[i], Files: make([]uintptr, len(b.files[i]))}
		for k, fd := range b.files[i] {
			attr.Files[k] = uintptr(local(fd)) // -1: ^uintptr(0), closed in the child
		}
		sys := *cmd.SysProcAttr
		sys.PidFD = nil // the reaper opens one in the shared table
		if b.ctty[i] >= 0 {
			sys.Ctty = local(b.ctty[i])
		}
		attr.Sys = &sys
		argv := cmd.Args
		if len(argv) == 0 {
			argv = []string{cmd.Path}
		}
		err := b.fork(i, func() (int, error) { return syscall.ForkExec(cmd.Path, argv, attr) })
		if err != nil {
			b.err = fmt.Errorf("%w: %s: %w", ErrNotStarted, cmd.Path, &os.PathError{Op: "fork/exec", Path: cmd.Path, Err: err})
			b.failed = b.idx[i]
			return
		}
		b.n++
	}
}

// start runs b on the forking thread, sending it the descriptors first, and returns once it is done.
func (s *spawner) start(b *batch) {
	s.dropTheirs()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.private {
		if err := sendFDs(s.sock, b.sent); err != nil {
			b.err = fmt.Errorf("%w: passing the descriptors of %d children to the forking thread: %w%s", ErrNotStarted,
				len(b.cmds), err, fdHint(err))
			b.failed = b.idx[0]
			return
		}
	}
	b.done = make(chan struct{})
	s.reqs <- b
	<-b.done
}

// close ends the forking thread (and with it the parent-death thread of the children it forked).
func (s *spawner) close() {
	s.dropTheirs()
	close(s.reqs)
	<-s.done
	if s.sock >= 0 { // the thread had a table of its own
		_ = unix.Close(s.sock)
	}
}

// maxRights is how many descriptors one SCM_RIGHTS message carries at most (the kernel's SCM_MAX_FD).
const maxRights = 253

func sendFDs(sock int, fds []int) error {
	for len(fds) > 0 {
		n := min(len(fds), maxRights)
		for {
			err := unix.Sendmsg(sock, []byte{0}, unix.UnixRights(fds[:n]...), nil, 0)
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			if err != nil {
				return err
			}
			break
		}
		fds = fds[n:]
	}
	return nil
}

// recvFDs receives the n descriptors sendFDs sent, in order, in as many messages as it sent. A message whose
// descriptors this thread's table could not all take (RLIMIT_NOFILE lowered meanwhile) comes with some of them, the
// rest dropped by the kernel (MSG_CTRUNC): every message is still taken, so that the next batch finds none of this
// one's, and the error says so. On an error it returns those it received.
func recvFDs(sock, n int) ([]int, error) {
	out := make([]int, 0, n)
	oob := make([]byte, unix.CmsgSpace(maxRights*4))
	var buf [1]byte
	dropped := false
	for msgs := (n + maxRights - 1) / maxRights; msgs > 0; {
		_, oobn, flags, _, err := unix.Recvmsg(sock, buf[:], oob, unix.MSG_CMSG_CLOEXEC)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return out, err
		}
		msgs--
		dropped = dropped || flags&unix.MSG_CTRUNC != 0
		cmsgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			return out, err
		}
		for _, m := range cmsgs {
			fds, err := unix.ParseUnixRights(&m)
			if err != nil {
				return out, err
			}
			out = append(out, fds...)
		}
	}
	if dropped || len(out) != n {
		return out, fmt.Errorf("the forking thread's table took %d of %d descriptors: %w", len(out), n, syscall.EMFILE)
	}
	return out, nil
}

// fdHint says what to do about running out of descriptors.
func fdHint(err error) string {
	if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ETOOMANYREFS) {
		return " (raise the open files limit, ulimit -n)"
	}
	return ""
}

// environ is the environment exec.Cmd.Start would give cmd: its Env (the process's own when nil, with PWD set to
// Dir then), each key once, the last value winning.
func environ(cmd *exec.Cmd) []string {
	env := cmd.Env
	if env == nil {
		env = os.Environ()
		if cmd.Dir != "" {
			if pwd, err := filepath.Abs(cmd.Dir); err == nil {
				env = append(env, "PWD="+pwd)
			}
		}
	}
	return dedupEnv(env)
}

// dedupEnv keeps the last entry of each key, as exec.Cmd does (an entry without '=' is kept as it is, an empty one
// dropped). An environment with each key once is returned as it is.
func dedupEnv(env []string) []string {
	if uniqueKeys(env) {
		return env
	}
	last := make(map[string]int, len(env))
	for i, kv := range env {
		if strings.Contains(kv, "=") {
			last[envKey(kv)] = i
		}
	}
	out := make([]string, 0, len(last))
	for i, kv := range env {
		if j, ok := last[envKey(kv)]; ok && j == i || !ok && kv != "" && !strings.Contains(kv, "=") {
			out = append(out, kv)
		}
	}
	return out
}

// uniqueKeys reports, without a map, whether env has each key once and no entry to drop, where env is sorted by key
// but for a few entries appended (what the launcher builds); otherwise it says false.
func uniqueKeys(env []string) bool {
	sorted := 0
	for sorted < len(env) && strings.Contains(env[sorted], "=") && (sorted == 0 || envKey(env[sorted-1]) < envKey(env[sorted])) {
		sorted++
	}
	if len(env)-sorted > 8 {
		return false
	}
	byKey := func(kv, k string) int { return strings.Compare(envKey(kv), k) }
	for i := sorted; i < len(env); i++ {
		k := envKey(env[i])
		if _, found := slices.BinarySearchFunc(env[:sorted], k, byKey); found || !strings.Contains(env[i], "=") ||
			slices.ContainsFunc(env[sorted:i], func(kv string) bool { return envKey(kv) == k }) {
			return false
		}
	}
	return true
}

// envKey is the key of a KEY=value entry: up to the first '=' after its first byte (a leading '=' belongs to the
// key, as exec.Cmd has it).
func envKey(kv string) string {
	if i := strings.IndexByte(kv[min(1, len(kv)):], '='); i >= 0 {
		return kv[:i+min(1, len(kv))]
	}
	return kv
}

// childFiles are the shared descriptors that become cmd's 0, 1, 2, ...: its stdio (devnull where nil) and its
// ExtraFiles (-1 where nil: closed in the child).
func childFiles(cmd *exec.Cmd, devnull *os.File) ([]int, error) {
	out := make([]int, 0, 3+len(cmd.ExtraFiles))
	for _, s := range []any{cmd.Stdin, cmd.Stdout, cmd.Stderr} {
		f, ok := s.(*os.File)
		switch {
		case s == nil || ok && f == nil:
			f = devnull
		case !ok:
			return nil, fmt.Errorf("%w: %s: with a reaper the child's stdio must be *os.File, not %T", ErrNotStarted, cmd.Path, s)
		}
		out = append(out, int(f.Fd()))
	}
	for _, f := range cmd.ExtraFiles {
		fd := -1
		if f != nil {
			fd = int(f.Fd())
		}
		out = append(out, fd)
	}
	return out, nil
}

// The kernel keeps a process's descriptors in a table it grows by doubling (64, 128, 256 ... entries). In a process
// whose threads share the table (every Go program) each growth waits for an RCU grace period, and meanwhile every
// thread that opens, pipes or duplicates a descriptor past the old end waits with it: 7-16 ms on a 2-core VM, 8-31
// ms on a 16-core one (docs/BENCHMARKS.md, "The descriptor table"). A start of 64 workers has some 450 descriptors
// open at its peak and paid three growths, one after the other, in the middle of the burst.

// ReserveFDsAhead readies this process's descriptor table for a burst that will have from least to most more
// descriptors open at once. When even least cannot fit in the table as it is, the table is grown in one step to hold
// most: one grace period instead of one per doubling. When least may fit it is left alone: the burst may then need
// no growth at all, where a reservation would always cost one (a start of 8 workers fits in the first 64 entries),
// or it grows the table once, rarely twice. Best effort: RLIMIT_NOFILE caps it; an error leaves the table as it was.
//
// The growth is made by another thread and ReserveFDsAhead returns at once, with a channel closed once that thread
// is about to ask the kernel for it (nil when no growth is needed). Its grace period passes while the caller goes
// on: a descriptor numbered within the table as it was opens at once meanwhile; one past its end (or another
// reservation) waits for the growth under way, the kernel making one at a time, and finds the room made. A caller
// about to go past the end waits for the channel first: had it got there before the growth began, it would have
// doubled the table itself. room is how many descriptors the table holds beyond the lowest free number (at most
// that many open meanwhile without waiting for the growth; fewer when some above it are open).
func ReserveFDsAhead(least, most int) (begun <-chan struct{}, room int) {
	top, room := reservation(least, most)
	if top == 0 {
		return nil, room
	}
	c := make(chan struct{})
	go growTo(top, c)
	return c, room
}

// reservation is the number the table must hold for ReserveFDsAhead(least, most), or 0 when it is to be left alone,
// and the room left in it as it is (0 when unknown).
func reservation(least, most int) (top, room int) {
	fd, err := unix.Open("/proc/self/status", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, 0
	}
	defer unix.Close(fd)
	size := fdTableSize(fd)
	if size <= 0 {
		return 0, 0
	}
	free, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0) // every number below it is taken
	if err != nil {
		return 0, 0
	}
	_ = unix.Close(free)
	room = max(size-free, 0)
	if free+least <= size {
		return 0, room
	}
	top = size + most // every open descriptor is numbered below size
	var lim unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &lim) == nil && uint64(top) > lim.Cur {
		top = int(lim.Cur)
	}
	if top <= size {
		return 0, room
	}
	return top, room
}

// growTo grows the table to hold top descriptors, and closes begun just before it asks the kernel.
// The lowest free number at or above top-1 is top-1 itself (it is past the table's end, or the table was grown
// meanwhile): the kernel grows the table to hold it, and the copy is closed at once. Nothing else is touched: F_DUPFD
// never replaces a descriptor. While that copy is open (from the growth's end until this goroutine runs again), a
// process forked from the shared table gets a table of top entries (fork sizes a child's table for its parent's
// highest open descriptor): the forking threads' own tables never hold it (ownTable copies only what they keep).
func growTo(top int, begun chan struct{}) {
	fd, err := unix.Open("/proc/self/status", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	close(begun)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	if hi, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, top-1); err == nil {
		_ = unix.Close(hi)
	}
}

// fdTableSize reads FDSize from fd, an open /proc/<pid>/status.
func fdTableSize(fd int) int {
	var buf [4096]byte
	n := 0
	for n < len(buf) {
		k, err := unix.Pread(fd, buf[n:], int64(n))
		if err == unix.EINTR {
			continue
		}
		if err != nil || k <= 0 {
			break
		}
		n += k
	}
	_, rest, ok := bytes.Cut(buf[:n], []byte("\nFDSize:"))
	if !ok {
		return 0
	}
	line, _, _ := bytes.Cut(rest, []byte("\n"))
	size, err := strconv.Atoi(string(bytes.TrimSpace(line)))
	if err != nil {
		return 0
	}
	return size
}

// FDLimitHint says which limit to raise when err is the process running out of file descriptors, and is empty
// otherwise.
func FDLimitHint(err error) string {
	if !errors.Is(err, syscall.EMFILE) && !errors.Is(err, syscall.ENFILE) {
		return ""
	}
	var lim syscall.Rlimit
	if e := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); e != nil {
		return " (out of file descriptors: raise ulimit -n; every worker needs about 6)"
	}
	return fmt.Sprintf(" (out of file descriptors: RLIMIT_NOFILE is %d (hard %d); raise ulimit -n, every worker needs about 6)",
		lim.Cur, lim.Max)
}

// ForkLimitHint says which limit to raise when err is a fork refused for want of processes (EAGAIN: the user's
// RLIMIT_NPROC, a cgroup's pids.max, the kernel's threads-max), and is empty otherwise.
func ForkLimitHint(err error) string {
	if !errors.Is(err, syscall.EAGAIN) {
		return ""
	}
	var lim syscall.Rlimit
	if e := syscall.Getrlimit(unix.RLIMIT_NPROC, &lim); e != nil {
		return " (out of processes: raise ulimit -u, or a container's pids limit, or start fewer workers)"
	}
	return fmt.Sprintf(" (out of processes: RLIMIT_NPROC is %d (hard %d), counted over every process of the user; "+
		"raise ulimit -u, or a container's pids limit, or start fewer workers)", lim.Cur, lim.Max)
}
