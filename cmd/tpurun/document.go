package main

import (
	"bytes"
	"io"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"tpurun/internal/console"
	"tpurun/internal/failure"
)

// consoles are the files tpurun writes: its stdout and stderr (one Console when they are one file), and where
// --json's document goes (stdout's Console, or --json-fd's).
type consoles struct {
	out, err, doc *console.Console
}

// documentFlags settles where the results document goes: --json, --json-frames and --json-fd each ask for it;
// --json-fd's descriptor (fdGiven) must be one the caller passed, from 3 up. It is marked close-on-exec: a worker
// holding the write end of the caller's pipe would delay the caller's end of file until the workers exit.
func (o *options) documentFlags(fdGiven bool) error {
	o.json = o.json || o.jsonFrames || fdGiven
	if !fdGiven {
		o.jsonFD = -1
		return nil
	}
	fd := o.jsonFD
	if fd < 3 {
		return &failure.ConfigError{Field: "--json-fd", Value: strconv.Itoa(fd), Hint: "use a descriptor from 3 up that the caller left open (subprocess.Popen's pass_fds); --json alone prints on stdout"}
	}
	if why := notPassed(fd); why != "" {
		return &failure.ConfigError{Field: "--json-fd", Value: strconv.Itoa(fd), Hint: why + ": pass tpurun the write end of a pipe (or a file open for writing), open and inheritable (subprocess.Popen's pass_fds)"}
	}
	unix.CloseOnExec(fd)
	return nil
}

// notPassed says why fd cannot be a descriptor the caller passed for the document, or "" when it can: not open in
// tpurun, or not a pipe, socket, file or device open for writing. The Go runtime holds descriptors of its own from
// 3 up before main runs (the cgroup files it reads for GOMAXPROCS, read-only; its epoll and eventfd, anonymous
// inodes): a number the caller did not pass may name one of those, which this refuses.
func notPassed(fd int) string {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return "no such open descriptor in tpurun (" + err.Error() + ")"
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFIFO, unix.S_IFSOCK, unix.S_IFREG, unix.S_IFCHR:
	default:
		return "not a pipe, socket, file or device"
	}
	flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		return "no such open descriptor in tpurun (" + err.Error() + ")"
	}
	if acc := flags & unix.O_ACCMODE; acc != unix.O_WRONLY && acc != unix.O_RDWR {
		return "not open for writing"
	}
	return ""
}

// documentConsole is the Console --json's document goes to: outc (stdout's) unless --json-fd names a descriptor.
func (o *options) documentConsole(outc *console.Console) *console.Console {
	if o.jsonFD < 0 {
		return outc
	}
	return console.NewConsole("--json-fd "+strconv.Itoa(o.jsonFD), os.NewFile(uintptr(o.jsonFD), "json-fd"))
}

// printDocument prints --json's document on its console, streamed (Document.Encode) in pieces the console copies
// one at a time; on one console with stderr (2>&1) in one write, so that no line of tpurun's log splits it. A write
// error is the console's, reported by the caller's Flush: the error returned is the encoder's.
func printDocument(encode func(io.Writer) error, doc, stderr *console.Console) error {
	if doc != stderr {
		return encode(doc)
	}
	var b bytes.Buffer
	if err := encode(&b); err != nil {
		return err
	}
	_, _ = doc.Write(b.Bytes())
	return nil
}
