"""Runs one `pocket eval` task, or the whole suite, as a Ray job: N parts (`--shard K/N`), one
Ray task each, then joins their logs into the report one run gives (`pocket eval merge` for a
task; for the suite, `pocket eval suite` without --shard over the parts' logs).

    scripts/py ray scripts/eval_ray.py --parts 2 --dir runs/bbh -- bbh MODEL.gguf
    scripts/py ray scripts/eval_ray.py --parts 8 --cpus-per-part 2 --dir runs/gsm8k \\
        -- gsm8k MODEL.gguf --variant gsm8k_cot
    scripts/py ray scripts/eval_ray.py --parts 8 --dir runs/card -- suite MODEL.gguf --limit 100

Everything after `--` is the task's own command line (`pocket eval` and its output flags are
added here). Without RAY_ADDRESS (or --address) Ray starts a local cluster with --local-cpus
CPUs; with one, the parts go to that cluster, whose nodes must have the pocket binary (--pocket)
and the model at the same paths (a shared file system, or the image every node runs).

Each part writes its log on the node that runs it and returns it; the driver keeps every
returned log under --dir as part-K-of-N.jsonl (the suite's: its task logs under --dir/work),
also when the part failed. Run the same command again after a failure: every part is sent with
its logs from --dir and resumes from them (a finished part generates nothing).

Output: the merged report (the task's --json shape with --json, else the text) on stdout, the
one run's log as --dir/merged.jsonl, and one line per finished part on stderr. For the suite:
its table on stdout (with --json, also --dir/suite.json), the one run's task logs in --dir/work.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

# Under `uv run` (scripts/py), Ray would ship the working directory to its workers; the parts
# need only the binary and the files their command names.
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
import ray  # noqa: E402


def parse():
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--parts", type=int, required=True, help="how many parts (N)")
    p.add_argument("--dir", required=True, help="where the parts' logs and the merged log go")
    p.add_argument("--pocket", default=shutil.which("pocket") or "target/release/pocket",
                   help="the pocket binary, at this path on every node (default: on PATH, or "
                        "target/release/pocket)")
    p.add_argument("--cpus-per-part", type=int, default=1,
                   help="CPUs Ray reserves per part; the part runs that many threads")
    p.add_argument("--address", default=os.environ.get("RAY_ADDRESS"),
                   help="a Ray cluster's address (default: $RAY_ADDRESS; none starts a local one)")
    p.add_argument("--local-cpus", type=int, default=os.cpu_count(),
                   help="CPUs of the local cluster when no address is given")
    p.add_argument("--json", action="store_true", help="print the merged report as JSON")
    p.add_argument("task", nargs=argparse.REMAINDER,
                   help="-- then the task's arguments, e.g. -- gsm8k MODEL --limit 200")
    a = p.parse_args()
    if a.task[:1] == ["--"]:
        a.task = a.task[1:]
    if not a.task:
        p.error("give the task after --, e.g. -- gsm8k MODEL")
    if a.parts < 1:
        p.error("--parts must be at least 1")
    for flag in ("--shard", "--out", "--json", "--threads", "-t", "--work"):
        if flag in a.task:
            p.error(f"the task's {flag} is set here; leave it out")
    return a


def is_suite(task):
    return task[0] == "suite"


@ray.remote(max_retries=2)
def run_part(pocket, task, k, n, threads, previous, cwd):
    """Runs part k/n and returns its log and report: from the driver's working directory
    `cwd` (so the task's relative paths mean what they mean there; a node without it uses
    its own), the log in a scratch directory of this node. `previous` is the part's log from
    an earlier attempt (resumed, not redone)."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix=f"pocket-part-{k}-") as tmp:
        if is_suite(task):
            # The suite's part keeps a log per task and build in its --work: all of them
            # travel, as {file name: bytes}.
            work = os.path.join(tmp, "work")
            os.makedirs(work)
            for name, data in (previous or {}).items():
                with open(os.path.join(work, name), "wb") as f:
                    f.write(data)
            cmd = [pocket, "eval", *task, "--shard", f"{k}/{n}", "--work", work,
                   "--threads", str(threads)]
        else:
            log = os.path.join(tmp, "part.jsonl")
            if previous:
                with open(log, "wb") as f:
                    f.write(previous)
            cmd = [pocket, "eval", *task, "--shard", f"{k}/{n}", "--out", log,
                   "--threads", str(threads), "--json"]
        start = time.monotonic()
        done = subprocess.run(cmd, capture_output=True, text=True,
                              cwd=cwd if os.path.isdir(cwd) else None)
        if is_suite(task):
            logged = {}
            for name in os.listdir(work):
                with open(os.path.join(work, name), "rb") as f:
                    logged[name] = f.read()
        else:
            with open(log, "rb") as f:
                logged = f.read()
        return {
            "k": k,
            "status": done.returncode,
            "stderr": done.stderr[-4000:],
            "report": done.stdout,
            "log": logged,
            "seconds": time.monotonic() - start,
            "node": ray.util.get_node_ip_address(),
        }


def main():
    a = parse()
    if os.path.exists(a.pocket):
        a.pocket = os.path.abspath(a.pocket)
    os.makedirs(a.dir, exist_ok=True)
    suite = is_suite(a.task)
    logs = [os.path.join(a.dir, f"part-{k}-of-{a.parts}.jsonl") for k in range(1, a.parts + 1)]
    work = os.path.join(a.dir, "work")
    if suite:
        os.makedirs(work, exist_ok=True)
    if a.address:
        ray.init(address=a.address, log_to_driver=False)
    else:
        ray.init(num_cpus=a.local_cpus, include_dashboard=False, log_to_driver=False)
    previous = []
    for k, path in enumerate(logs, 1):
        if suite:
            # This part's task logs from an earlier attempt.
            mine = f".part-{k}-of-{a.parts}.jsonl"
            previous.append({f: open(os.path.join(work, f), "rb").read()
                             for f in os.listdir(work) if f.endswith(mine)})
        else:
            previous.append(open(path, "rb").read() if os.path.exists(path) else b"")
    pending = [
        run_part.options(num_cpus=a.cpus_per_part).remote(
            a.pocket, a.task, k, a.parts, a.cpus_per_part, previous[k - 1], os.getcwd())
        for k in range(1, a.parts + 1)
    ]
    failed = []
    while pending:
        ready, pending = ray.wait(pending, num_returns=1)
        r = ray.get(ready[0])
        k = r["k"]
        # Keep whatever the part finished, even when it failed: the next run resumes from it.
        kept = r["log"].items() if suite else [(None, r["log"])]
        for name, data in kept:
            path = os.path.join(work, name) if suite else logs[k - 1]
            with open(path + ".tmp", "wb") as f:
                f.write(data)
            os.replace(path + ".tmp", path)
        if r["status"] != 0:
            failed.append(f"part {k}/{a.parts}: exit {r['status']}: {r['stderr'].strip()}")
            continue
        what = (f"{len(r['log'])} task logs" if suite
                else f"{json.loads(r['report'])['n']} items")
        print(f"part {k}/{a.parts}: {what} in {r['seconds']:.1f} s on {r['node']}",
              file=sys.stderr)
    ray.shutdown()
    if failed:
        sys.exit("eval_ray: " + "\n".join(failed) + "\n(run the same command again to resume)")
    if suite:
        # The suite without --shard joins each task's parts into its one log under --work,
        # generates nothing, and prints the one run's table.
        cmd = [a.pocket, "eval", *a.task, "--work", work]
        if a.json:
            cmd += ["--json", os.path.join(a.dir, "suite.json")]
        sys.exit(subprocess.run(cmd).returncode)
    merged = os.path.join(a.dir, "merged.jsonl")
    if os.path.exists(merged):
        os.remove(merged)
    cmd = [a.pocket, "eval", "merge", *logs, "--out", merged]
    if a.json:
        cmd.append("--json")
    sys.exit(subprocess.run(cmd).returncode)


if __name__ == "__main__":
    main()
