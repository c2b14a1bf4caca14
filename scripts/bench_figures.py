"""One figure of `pocket bench --json`'s shape from timed repetitions; shared by the peers' bench
scripts (bench_llamacpp.py, bench_mnn.py), which run in different venvs."""
import statistics


def figure(tokens, seconds, depth=None):
    rates = sorted(tokens / s for s in seconds)
    f = {"tokens": tokens, "tok_s_median": statistics.median(rates),
         "tok_s_min": rates[0], "tok_s_max": rates[-1]}
    if depth is not None:
        f["depth"] = depth
    return f
