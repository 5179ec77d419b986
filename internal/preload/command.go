package preload

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
)

// Command is a Python command line split the way the interpreter reads it: `python3 -u train.py --lr 3` is
// Python ["python3", "-u"], Target "train.py", Args ["--lr", "3"]; `python3 -m pkg.train` has Module set.
type Command struct {
	Python []string // the interpreter and its own options
	Module bool     // -m: Target is a module name; otherwise a file (or a directory with a __main__.py)
	Target string
	Args   []string // the program's arguments: sys.argv[1:]
}

// Argv is sys.argv as the interpreter sets it before running the program: the target first (a module's is
// replaced by its file by runpy, as under -m).
func (c Command) Argv() []string { return append([]string{c.Target}, c.Args...) }

// pythonName matches the file names of Python interpreters: python, python3, python3.11, pypy3, python3.11-dbg.
var pythonName = regexp.MustCompile(`^(python|pypy)[0-9.]*(-dbg)?$`)

// withArg are the interpreter's options that take a value (attached, -Wignore, or the next argument).
const withArg = "WX"

// noArg are the interpreter's options without a value that a preloaded interpreter can honour: they are given to
// it, so every forked worker runs with the same sys.flags.
const noArg = "bBdEIOPqRsSuv"

// ParseCommand splits argv, a Python command line, into the interpreter with its options, the program and its
// arguments. argv[0] must be a Python interpreter (its file name python..., or exactly pythonExec, the
// PYTHON_EXEC in use). What a preloaded interpreter cannot fork is refused, each with the reason: -c (no program
// file), -i (interactive), -x, a program read from stdin ("-" or none), and the options that print and exit.
func ParseCommand(argv []string, pythonExec string) (Command, error) {
	if len(argv) == 0 {
		return Command{}, fmt.Errorf("no program")
	}
	if !pythonName.MatchString(filepath.Base(argv[0])) && (pythonExec == "" || argv[0] != pythonExec) {
		return Command{}, fmt.Errorf("PROGRAM %q is not a Python interpreter, and --preload forks Python workers: "+
			"give a Python program (python3 train.py, train.py, -m pkg, or --fn), or leave --preload out", argv[0])
	}
	c := Command{Python: []string{argv[0]}}
	for i := 1; i < len(argv); i++ {
		a := argv[i]
		switch {
		case a == "--":
			return c.program(argv[i+1:], false)
		case a == "-" || !strings.HasPrefix(a, "-"):
			return c.program(argv[i:], false)
		case strings.HasPrefix(a, "--check-hash-based-pycs"):
			c.Python = append(c.Python, a)
			if !strings.Contains(a, "=") {
				if i+1 >= len(argv) {
					return Command{}, fmt.Errorf("%s needs a value", a)
				}
				i++
				c.Python = append(c.Python, argv[i])
			}
		case strings.HasPrefix(a, "--"):
			return Command{}, fmt.Errorf("the interpreter option %s prints something and exits; run it without --preload", a)
		default:
			n, done, err := c.shortOptions(argv, i)
			if err != nil || done {
				return c, err
			}
			i = n
		}
	}
	return Command{}, fmt.Errorf("%q names no program: --preload needs a program file or -m MODULE", strings.Join(argv, " "))
}

// shortOptions takes the group of one-letter options at argv[i] (-u, -uB, -OO, -Wignore, -W ignore, -mpkg, -m pkg):
// it returns the index of the last argument it used, and done once -m has made c whole.
func (c *Command) shortOptions(argv []string, i int) (int, bool, error) {
	a := argv[i]
	for j := 1; j < len(a); j++ {
		o := a[j]
		switch {
		case o == 'm':
			rest := argv[i+1:]
			if j+1 < len(a) {
				rest = append([]string{a[j+1:]}, rest...)
			}
			if len(rest) == 0 || rest[0] == "" {
				return i, true, fmt.Errorf("-m needs a module name")
			}
			*c, _ = c.program(rest, true)
			return i, true, nil
		case strings.IndexByte(withArg, o) >= 0:
			c.Python = append(c.Python, "-"+string(o))
			if j+1 < len(a) {
				c.Python[len(c.Python)-1] += a[j+1:]
				return i, false, nil
			}
			if i+1 >= len(argv) {
				return i, true, fmt.Errorf("-%c needs a value", o)
			}
			c.Python = append(c.Python, argv[i+1])
			return i + 1, false, nil
		case strings.IndexByte(noArg, o) >= 0:
			c.Python = append(c.Python, "-"+string(o))
		case o == 'c':
			return i, true, fmt.Errorf("-c runs a command string, not a program file; --preload needs a file or -m MODULE")
		case o == 'i':
			return i, true, fmt.Errorf("-i is interactive; a forked worker has no terminal of its own: leave -i or --preload out")
		case o == 'x':
			return i, true, fmt.Errorf("-x (skip the first line of the source) is not supported with --preload; leave one of them out")
		default:
			return i, true, fmt.Errorf("the interpreter option -%c is not supported with --preload (it prints something and exits, or is unknown)", o)
		}
	}
	return i, false, nil
}

// program completes c with the program part of the command line: a file (or -m's module) and its arguments.
func (c Command) program(rest []string, module bool) (Command, error) {
	if len(rest) == 0 || (!module && rest[0] == "-") {
		return Command{}, fmt.Errorf("a program read from stdin cannot be forked with --preload; give a program file or -m MODULE")
	}
	c.Module, c.Target, c.Args = module, rest[0], append([]string{}, rest[1:]...)
	return c, nil
}
