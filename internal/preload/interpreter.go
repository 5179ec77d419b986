package preload

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"tpurun/internal/failure"
	"tpurun/internal/proc"
)

// Config is how to start a preloaded interpreter.
type Config struct {
	Python  []string // the interpreter and its options, as in the workers' Command
	Preload []string // module names, imported in this order; "__main__" is the caller's main module in function mode
	Path0   string   // sys.path[0] while importing: the directory of the program file, or the working directory for -m
	Env     []string // what every worker's environment shares
	Dir     string   // working directory
	// DevRoot ("/dev" when empty) holds the device nodes no descriptor may be open on: those DeviceNodes match, as
	// globs below it (topology.DeviceNodeGlobs: each device kind names its own). Lockfile is libtpu's lock
	// (topology.DefaultLockfile), which no descriptor may be open on either. The caller hands them as data (none
	// given: none checked); tests point them into a fake tree.
	DevRoot, Lockfile string
	DeviceNodes       []string
	Stdout, Stderr    *os.File // the interpreter's own output (what the imports print), write ends
	Reaper            *proc.Reaper
	Log               *zap.Logger
}

// RefusedError: the preloaded interpreter found itself unsafe to fork (a thread, a device node, the libtpu
// lockfile, an initialized runtime) or could not import a module; it exited 2 and forked nothing after it.
type RefusedError struct {
	Module  string // the module whose import did it; "" when it was not an import
	Problem string // what it did
	Hint    string // how to fix it
}

func (e *RefusedError) Error() string {
	return e.Problem + "; " + e.Hint
}

// ErrGone: the preloaded interpreter is not running any more (it crashed, was killed, or was closed).
var ErrGone = errors.New("the preloaded interpreter is gone")

// errTalk marks a failed exchange on the control socket.
var errTalk = errors.New("control socket")

// forkTimeout bounds one fork request: the interpreter answers in milliseconds unless it is wedged.
const forkTimeout = 30 * time.Second

// Interpreter is a running preloaded interpreter.
type Interpreter struct {
	p       *proc.Process
	conn    *net.UnixConn
	log     *zap.Logger
	mu      sync.Mutex // one request at a time
	exited  chan struct{}
	dir     string  // the private directory its Python code runs from (scripts), removed when it ends
	Python  string  // the interpreter's version, e.g. "3.11.2"
	Seconds float64 // how long the imports took
}

// Start starts the preloaded interpreter and waits until it has imported every module of cfg.Preload and found
// itself safe to fork (nil), or refused (*RefusedError), or died, or ctx is done (it is killed then, and the
// error is ctx's cause). cfg.Reaper must be this process's reaper: forked workers are re-parented to it.
func Start(ctx context.Context, cfg Config) (*Interpreter, error) {
	if cfg.Reaper == nil {
		return nil, errors.New("a preloaded interpreter needs tpurun to be the child subreaper (or PID 1): the workers it forks are re-parented to it")
	}
	cfg.Log = cmp.Or(cfg.Log, zap.NewNop())
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "preload-control"), os.NewFile(uintptr(fds[1]), "preload-control")
	defer theirs.Close()
	c, err := net.FileConn(ours)
	ours.Close()
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	ip := &Interpreter{conn: c.(*net.UnixConn), log: cfg.Log, exited: make(chan struct{})}
	if ip.dir, err = scripts(); err != nil {
		ip.conn.Close()
		return nil, err
	}
	cmd := proc.Command(cfg.Python[0], append(slices.Clone(cfg.Python[1:]), filepath.Join(ip.dir, serverScript))...)
	cmd.Env, cmd.Dir, cmd.Stdout, cmd.Stderr = cfg.Env, cfg.Dir, cfg.Stdout, cfg.Stderr
	cmd.ExtraFiles = []*os.File{theirs}
	p, err := cfg.Reaper.Start(cmd, func(*proc.Process) { close(ip.exited) })
	if err != nil {
		ip.conn.Close()
		os.RemoveAll(ip.dir)
		return nil, err
	}
	ip.p = p
	cfg.Reaper.Keep(p) // it outlives each attempt's sweep; its descendants do not
	if err := ip.handshake(ctx, cfg); err != nil {
		ip.end(0)
		return nil, err
	}
	return ip, nil
}

// handshake sends the configuration and waits for the interpreter's verdict.
func (ip *Interpreter) handshake(ctx context.Context, cfg Config) error {
	stop := context.AfterFunc(ctx, func() { _ = ip.conn.SetDeadline(time.Now()) })
	defer stop()
	hello := map[string]any{"preload": cfg.Preload, "path0": b64(cfg.Path0), "env": b64s(cfg.Env), "dev_root": cfg.DevRoot,
		"device_nodes": cfg.DeviceNodes, "lockfile": cfg.Lockfile}
	if err := ip.send(hello, nil); err != nil {
		return ip.gone("sending its configuration", err)
	}
	var m reply
	if err := ip.recv(&m); err != nil {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return ip.gone("importing "+fmt.Sprint(cfg.Preload), err)
	}
	if m.Kind == "refused" {
		return &RefusedError{Module: m.Module, Problem: m.Problem, Hint: m.Hint}
	}
	ip.Python, ip.Seconds = m.Python, m.Seconds // "ready"
	return nil
}

// reply is a message from the interpreter.
type reply struct {
	Kind    string  `json:"kind"`
	PID     int     `json:"pid"`
	Python  string  `json:"python"`
	Seconds float64 `json:"seconds"`
	Module  string  `json:"module"`
	Problem string  `json:"problem"`
	Hint    string  `json:"hint"`
	Message string  `json:"message"`
}

// gone is the error of a conversation that failed while doing what: the interpreter's exit if it exited.
func (ip *Interpreter) gone(what string, err error) error {
	select {
	case <-ip.exited: // it closed the socket and is exiting: given 2 seconds to be seen gone
		ex := ip.p.Wait()
		how := fmt.Sprintf("exited with code %d", ex.ExitCode)
		if ex.Signal != 0 {
			how = "was killed by " + failure.SignalName(ex.Signal)
		}
		return fmt.Errorf("%w: the preloaded interpreter (pid %d) %s while %s; its own output is above, prefixed [preload]", ErrGone, ex.PID, how, what)
	case <-time.After(2 * time.Second):
		return fmt.Errorf("%w: the preloaded interpreter (pid %d) stopped answering while %s: %w", ErrGone, ip.p.PID(), what, err)
	}
}

// PID is the interpreter's pid.
func (ip *Interpreter) PID() int { return ip.p.PID() }

// Alive reports whether the interpreter is still running.
func (ip *Interpreter) Alive() bool {
	select {
	case <-ip.exited:
		return false
	default:
		return !ip.p.Exited() // dead already, its exit not yet delivered: a worker that killed it has been seen exit
	}
}

// Request is one worker to fork.
type Request struct {
	Command Command  // the program, as ParseCommand split the worker's command line
	Argv    []string // the whole command line, as exec'd without --preload: sys.orig_argv
	Env     []string // the worker's complete environment
	Dir     string   // its working directory ("" the interpreter's)
	// Files become the worker's descriptors 0, 1, 2, 3, ...: stdin, stdout, stderr, then the inherited files (the
	// result channel at 3). The worker gets copies; the caller keeps and closes its own.
	Files []*os.File
}

// Fork forks one worker from the interpreter and adopts it (see proc.Reaper.AdoptHeld): the returned process is
// held like one from proc.StartHeld, and its exit is delivered to onExit. The worker runs its program only once
// it is adopted. A *RefusedError means the interpreter found itself unsafe to fork now (it exits 2), ErrGone that
// it is not running.
func (ip *Interpreter) Fork(rp *proc.Reaper, req Request, onExit func(*proc.Process)) (*proc.Process, error) {
	ip.mu.Lock()
	defer ip.mu.Unlock()
	if !ip.Alive() {
		return nil, fmt.Errorf("%w (pid %d)", ErrGone, ip.p.PID())
	}
	goR, goW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("go pipe: %w", err)
	}
	defer goW.Close() // without the go byte, a forked worker reads end of file and exits
	fds := make([]int, 0, len(req.Files)+1)
	for _, f := range req.Files {
		fds = append(fds, int(f.Fd()))
	}
	fds = append(fds, int(goR.Fd()))
	p, err := rp.AdoptHeld(func() (int, error) {
		defer goR.Close()
		return ip.fork(req, fds)
	}, onExit)
	if errors.Is(err, errTalk) { // explained once the reaper's lock is free: it delivers the interpreter's exit
		return nil, ip.gone("forking a worker", err)
	}
	if err != nil {
		return nil, err
	}
	if _, err := goW.Write([]byte("g")); err != nil { // the worker died already: its exit is delivered as any
		ip.log.Debug("go byte not written", zap.Int("pid", p.PID()), zap.Error(err))
	}
	return p, nil
}

func (ip *Interpreter) fork(req Request, fds []int) (int, error) {
	_ = ip.conn.SetDeadline(time.Now().Add(forkTimeout))
	defer func() { _ = ip.conn.SetDeadline(time.Time{}) }()
	mode := "file"
	if req.Command.Module {
		mode = "module"
	}
	msg := map[string]any{"op": "fork", "mode": mode, "target": b64(req.Command.Target), "argv": b64s(req.Command.Argv()),
		"orig_argv": b64s(req.Argv), "env": b64s(req.Env), "dir": b64(req.Dir)}
	if err := ip.send(msg, unix.UnixRights(fds...)); err != nil {
		return 0, fmt.Errorf("%w: %w", errTalk, err)
	}
	var m reply
	if err := ip.recv(&m); err != nil {
		return 0, fmt.Errorf("%w: %w", errTalk, err)
	}
	switch m.Kind {
	case "forked":
		return m.PID, nil
	case "refused":
		if m.PID > 0 { // forked before it found itself unsafe: our unreaped child (no orphan is reaped during the fork)
			_ = unix.Kill(m.PID, syscall.SIGKILL)
		}
		return 0, &RefusedError{Module: m.Module, Problem: m.Problem, Hint: m.Hint}
	}
	return 0, fmt.Errorf("the preloaded interpreter (pid %d) could not fork: %s", ip.p.PID(), m.Message)
}

// send writes one message (with descriptors in oob) to the interpreter.
func (ip *Interpreter) send(msg any, oob []byte) error {
	body, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	frame := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(body)), uint32(len(body)))
	frame = append(frame, body...)
	n, _, err := ip.conn.WriteMsgUnix(frame, oob, nil)
	if err != nil {
		return err
	}
	if n < len(frame) { // a stream socket may take part of it: the rest without descriptors
		_, err = ip.conn.Write(frame[n:])
	}
	return err
}

// recv reads one message from the interpreter into m.
func (ip *Interpreter) recv(m *reply) error {
	var head [4]byte
	if _, err := io.ReadFull(ip.conn, head[:]); err != nil {
		return err
	}
	body := make([]byte, binary.BigEndian.Uint32(head[:]))
	if _, err := io.ReadFull(ip.conn, body); err != nil {
		return err
	}
	return json.Unmarshal(body, m)
}

// Close ends the interpreter: end of file on its socket, then SIGKILL if it has not exited within a second; it
// returns once it is reaped. Workers it forked are not touched: they are tpurun's.
func (ip *Interpreter) Close() {
	ip.mu.Lock()
	defer ip.mu.Unlock()
	ip.end(time.Second)
}

// end closes the socket, kills the interpreter unless it exits within grace, and reaps it.
func (ip *Interpreter) end(grace time.Duration) {
	_ = ip.conn.Close()
	select {
	case <-ip.exited:
	case <-time.After(grace):
		_ = ip.p.Signal(syscall.SIGKILL)
	}
	ip.p.Wait()
	os.RemoveAll(ip.dir)
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func b64s(l []string) []string {
	out := make([]string, len(l))
	for i, s := range l {
		out[i] = b64(s)
	}
	return out
}
