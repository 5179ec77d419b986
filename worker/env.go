package worker

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// The environment variables of the contract, set by the launcher for every worker.
const (
	EnvResultFD = "TPURUN_RESULT_FD" // the inherited file descriptor of the result channel (3)
	EnvReplicas = "TPURUN_REPLICAS"  // the replicas this worker owns, comma-joined ("0" or "0,1")
	EnvRunID    = "TPURUN_RUN_ID"    // the job's run id
	EnvSweepTag = "TPURUN_SWEEP_TAG" // marks the processes of one launcher for its orphan sweep
	// EnvResultID is the identity of the worker's result pipe, "<st_dev>:<st_ino>" in decimal (ChannelID of the
	// write end). It is per worker, like EnvResultFD. A client that finds it set refuses a descriptor that is
	// not that pipe: a program started by a worker inherits the worker's variables, not its channel.
	EnvResultID = "TPURUN_RESULT_ID"
	// EnvPreloaded marks a worker forked from tpurun's preloaded interpreter (--preload): the modules it had
	// imported, comma-joined. It is the one variable in which such a worker's environment differs from an exec'd one.
	EnvPreloaded = "TPURUN_PRELOADED"
	// EnvPreload is the environment twin of --preload: the modules to import once and fork the workers from.
	EnvPreload = "TPURUN_PRELOAD"
)

// The variables of function mode, read by the Python runner (python3 -m tpurun.fn) and set by tpurun.spawn();
// the launcher passes them on to every worker unchanged.
const (
	EnvFnArgsJSON = "TPURUN_FN_ARGS_JSON" // the JSON list of arguments, when --args-json is not given
	EnvFnArgsFile = "TPURUN_FN_ARGS_FILE" // a file of the caller's holding the pickled tuple of arguments
	EnvFnMain     = "TPURUN_FN_MAIN"      // the caller's main module (a script's path or a module name), imported as __mp_main__
	// EnvFnAuthkeyFile is a file of the caller's holding its multiprocessing authkey, set with EnvFnArgsFile, so
	// that a multiprocessing.Manager() proxy among the pickled arguments connects.
	EnvFnAuthkeyFile = "TPURUN_FN_AUTHKEY_FILE"
	// EnvFnFunctionFile is a file of the caller's holding the function pickled by value (cloudpickle), for one the
	// workers cannot import by name (a lambda, a nested function, one defined in a notebook or on stdin).
	EnvFnFunctionFile = "TPURUN_FN_FUNCTION_FILE"
)

// EnvCallerPython is set by tpurun.spawn() and tpurun.run() for the tpurun they start: the calling interpreter's
// sys.executable, which the workers run unless --python or $PYTHON_EXEC names another (as xmp.spawn's children
// run the caller's interpreter; the launcher's rule for the workers' Python).
const EnvCallerPython = "TPURUN_CALLER_PYTHON"

// TargetErrorType is the error type the function runner (tpurun.fn) reports for every replica when its target
// cannot be used (no such module or function, an import that raised): a configuration error, not a replica's.
const TargetErrorType = "tpurun.TargetError"

// ResultFD is the file descriptor number of a worker's result channel.
const ResultFD = 3

// ErrNoChannel means the process was not started by tpurun with a result channel.
var ErrNoChannel = errors.New("no tpurun result channel")

// ErrBadEnv means a contract variable holds a value that cannot be parsed.
var ErrBadEnv = errors.New("bad tpurun environment")

// EnvError names the variable and the value that could not be used.
type EnvError struct {
	Var, Value string
	Err        error // ErrNoChannel or ErrBadEnv
	Detail     string
}

func (e *EnvError) Error() string {
	if e.Value == "" && errors.Is(e.Err, ErrNoChannel) {
		return fmt.Sprintf("%v: %s is not set; run this program under tpurun (or use worker.NewClient in tests)", e.Err, e.Var)
	}
	return fmt.Sprintf("%v: %s=%q: %s", e.Err, e.Var, e.Value, e.Detail)
}

func (e *EnvError) Unwrap() error { return e.Err }

// ParseReplicas parses a TPURUN_REPLICAS value: non-negative decimal ordinals, comma-separated, no duplicates,
// at least one.
func ParseReplicas(s string) ([]int, error) {
	bad := func(detail string) error {
		return &EnvError{Var: EnvReplicas, Value: s, Err: ErrBadEnv, Detail: detail}
	}
	if strings.TrimSpace(s) == "" {
		return nil, bad("empty; want replica ordinals such as \"0\" or \"0,1\"")
	}
	parts := strings.Split(s, ",")
	out := make([]int, 0, len(parts))
	seen := make(map[int]bool, len(parts))
	for i, p := range parts {
		p = strings.TrimSpace(p)
		v, err := strconv.ParseUint(p, 10, 31)
		if err != nil {
			return nil, bad(fmt.Sprintf("entry %d (%q) is not a replica ordinal between 0 and 2^31-1", i, p))
		}
		if seen[int(v)] {
			return nil, bad(fmt.Sprintf("replica %d is listed twice", v))
		}
		seen[int(v)] = true
		out = append(out, int(v))
	}
	return out, nil
}

// FormatReplicas is the inverse of ParseReplicas.
func FormatReplicas(replicas []int) string {
	s := make([]string, len(replicas))
	for i, r := range replicas {
		s[i] = strconv.Itoa(r)
	}
	return strings.Join(s, ",")
}

// replicasFromEnv reads TPURUN_REPLICAS. There is no fallback: a worker's rank is not its replica (on hosts with
// two devices per process rank r owns 2r and 2r+1), so a channel without TPURUN_REPLICAS is a broken environment.
func replicasFromEnv(getenv func(string) string) ([]int, error) {
	v := getenv(EnvReplicas)
	if v != "" {
		return ParseReplicas(v)
	}
	if fd := getenv(EnvResultFD); fd != "" {
		return nil, &EnvError{Var: EnvReplicas, Err: ErrBadEnv, Detail: fmt.Sprintf("not set, but %s=%q is: "+
			"whatever started this process passed a result channel without the replicas this worker owns; tpurun "+
			"sets both, a wrapper that passes %s on must pass %s too", EnvResultFD, fd, EnvResultFD, EnvReplicas)}
	}
	return nil, &EnvError{Var: EnvReplicas, Err: ErrNoChannel}
}

// Replicas returns the replicas this process owns, from TPURUN_REPLICAS.
func Replicas() ([]int, error) { return replicasFromEnv(os.Getenv) }

// ChannelID returns the identity of a result pipe for EnvResultID: "<st_dev>:<st_ino>" of f in decimal. The
// launcher computes it from the write end it hands a worker (both ends of a pipe share it).
func ChannelID(f *os.File) (string, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return "", fmt.Errorf("identity of the result channel %s: %w", f.Name(), err)
	}
	return formatChannelID(uint64(st.Dev), st.Ino), nil
}

func formatChannelID(dev, ino uint64) string {
	return strconv.FormatUint(dev, 10) + ":" + strconv.FormatUint(ino, 10)
}

// ParseChannelID parses an EnvResultID value, "<st_dev>:<st_ino>" in decimal.
func ParseChannelID(s string) (dev, ino uint64, err error) {
	d, i, ok := strings.Cut(strings.TrimSpace(s), ":")
	dev, derr := strconv.ParseUint(d, 10, 64) // no sign, no underscores
	ino, ierr := strconv.ParseUint(i, 10, 64)
	if !ok || derr != nil || ierr != nil {
		return 0, 0, &EnvError{Var: EnvResultID, Value: s, Err: ErrBadEnv,
			Detail: "want <st_dev>:<st_ino> of the result pipe in decimal, as tpurun sets it"}
	}
	return dev, ino, nil
}

// channelProblem says why descriptor fd (EnvResultFD=v) is not the result channel tpurun gave this process, as an
// *EnvError, or returns nil when it is: open, writable and, when EnvResultID is set, the very pipe it names.
func channelProblem(fd int, v string, getenv func(string) string) error {
	bad := func(detail string) error {
		return &EnvError{Var: EnvResultFD, Value: v, Err: ErrBadEnv, Detail: detail}
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return bad(fmt.Sprintf("descriptor %d is not open in this process (%v); it must be inherited from tpurun", fd, err))
	}
	if id := getenv(EnvResultID); strings.TrimSpace(id) != "" {
		dev, ino, err := ParseChannelID(id)
		if err != nil {
			return err
		}
		if st.Mode&syscall.S_IFMT != syscall.S_IFIFO || uint64(st.Dev) != dev || st.Ino != ino {
			return bad(fmt.Sprintf("descriptor %d is %s, not the pipe %s=%s names, so it is not the result channel "+
				"tpurun gave this process. The variables were probably inherited from a tpurun worker that started "+
				"this program: only that worker may report (hand the values back to it), or unset %s",
				fd, describeFile(&st), EnvResultID, strings.TrimSpace(id), EnvResultFD))
		}
	}
	flags, _, errno := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_GETFL, 0)
	if errno == 0 && flags&syscall.O_ACCMODE == syscall.O_RDONLY {
		return bad(fmt.Sprintf("descriptor %d is %s open read-only; the channel is the write end of a pipe", fd, describeFile(&st)))
	}
	return nil
}

// fileKinds names the file types a descriptor found in place of the result channel may be.
var fileKinds = map[uint32]string{syscall.S_IFIFO: "a pipe", syscall.S_IFREG: "a regular file",
	syscall.S_IFSOCK: "a socket", syscall.S_IFCHR: "a character device", syscall.S_IFDIR: "a directory"}

func describeFile(st *syscall.Stat_t) string {
	kind, ok := fileKinds[st.Mode&syscall.S_IFMT]
	if !ok {
		kind = fmt.Sprintf("a file of mode %o", st.Mode)
	}
	return kind + " (" + formatChannelID(uint64(st.Dev), st.Ino) + ")"
}
