"""Print every signal this process receives, one line each: dumb-init's tests/lib/print_signals.py, made exact.

Every signal is blocked and taken with sigwaitinfo, one delivery at a time, so a signal sent twice is printed twice
(a real-time signal always; a standard one unless the second came while the first was still pending). Prints
"ready <pid>" first. SIGTSTP, SIGTTIN and SIGTTOU are printed and then stop the process (SIGSTOP), as their
default action would. PRINT_SIGNALS_EXIT lists the signals after which it exits 0 (default "2,3,15": SIGINT,
SIGQUIT, SIGTERM; "none": never). With PRINT_SIGNALS_TSTP=keep it prints SIGTSTP, SIGTTIN and SIGTTOU and goes on,
as a program that takes them itself and never stops. With PRINT_SIGNALS_CHILD=group or =setsid it first starts a copy of itself (in
its process group, or in a new session), waits until that copy is ready, prints "child <pid>" and exits 0: a
finished worker that leaves a helper behind (the helper prints to the same stdout). Stdlib only.
"""
import os
import signal
import subprocess
import sys


def out(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def start_child(mode):
    env = dict(os.environ)
    del env["PRINT_SIGNALS_CHILD"]
    r, w = os.pipe()
    env["PRINT_SIGNALS_READY_FD"] = str(w)
    child = subprocess.Popen([sys.executable, __file__], env=env, pass_fds=(w,), start_new_session=(mode == "setsid"))
    os.close(w)
    os.read(r, 16)  # the child is ready: its signals are blocked
    out("child %d %s" % (child.pid, mode))
    os._exit(0)


def main():
    mode = os.environ.get("PRINT_SIGNALS_CHILD")
    if mode:
        start_child(mode)
    exit_on = os.environ.get("PRINT_SIGNALS_EXIT", "2,3,15")
    exit_on = set() if exit_on == "none" else {int(s) for s in exit_on.split(",")}
    keep = os.environ.get("PRINT_SIGNALS_TSTP")
    every = set(range(1, signal.NSIG)) - {signal.SIGKILL, signal.SIGSTOP, 32, 33}
    for s in every:
        try:
            signal.signal(s, signal.SIG_DFL)  # Python ignores SIGPIPE and SIGXFSZ; blocked, nothing is default
        except (OSError, ValueError):
            pass
    signal.pthread_sigmask(signal.SIG_BLOCK, every)
    out("ready %d" % os.getpid())
    ready_fd = os.environ.get("PRINT_SIGNALS_READY_FD")
    if ready_fd:
        os.write(int(ready_fd), b"ready")
        os.close(int(ready_fd))
    while True:
        info = signal.sigwaitinfo(every)
        out(str(info.si_signo))
        if info.si_signo in exit_on:
            return 0
        if info.si_signo in (signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU) and keep != "keep":
            # a SIGCONT sent since the stop signal cancels it, as the kernel's last of a stop and a continue wins
            # (one sent between this look and the SIGSTOP is lost: a worker that takes SIGTSTP itself has that window)
            if signal.SIGCONT not in signal.sigpending():
                os.kill(os.getpid(), signal.SIGSTOP)


if __name__ == "__main__":
    sys.exit(main())
