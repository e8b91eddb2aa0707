"""How fast the payload codecs code (issue 43): encode and decode rates of bf16, fp16 and int8 in GB/s of
payload, on one core, for a message of ``--rows`` x ``--k`` standard normal float64 entries (median of
``--repeat`` after one untimed round trip, which compiles); with ``--baseline REF`` the codecs of git commit
REF are timed too, in a process of their own (PYTHONPATH), and the ratios printed.

    .venv/bin/python bench/codec_rates.py [--rows 4096] [--k 32] [--repeat 20] [--baseline c40d43c]

These rates are what ``compress="auto"`` weighs against a link's bandwidth (it measures them again at
build, on the plan's own k and dtype). Writes bench/results/codec_rates.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, extract_baseline  # noqa: E402

CODED = ("bf16", "fp16", "int8")


def measure(rows_count: int, k: int, repeat: int) -> dict:
    from sparsewire.wire import codecs

    rng = np.random.default_rng(1)
    rows = rng.standard_normal((rows_count, k))
    rates = {}
    for name in CODED:
        wire = np.zeros(codecs.max_message_bytes(name, rows_count, k, 8), np.uint8)
        out = np.empty_like(rows)
        codecs.decode(name, wire[: codecs.encode(name, rows, wire, rng)], out)
        encode, decode = [], []
        for _ in range(repeat):
            began = time.perf_counter()
            size = codecs.encode(name, rows, wire, rng)
            encode.append(time.perf_counter() - began)
            began = time.perf_counter()
            codecs.decode(name, wire[:size], out)
            decode.append(time.perf_counter() - began)
        rates[name] = {"encode": rows.nbytes / float(np.median(encode)), "decode": rows.nbytes / float(np.median(decode))}
    return {"package": str(Path(codecs.__file__).parent.parent), "rates": rates}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=4096, help="rows per message (default: 4096)")
    parser.add_argument("--k", type=int, default=32, help="entries per row (default: 32)")
    parser.add_argument("--repeat", type=int, default=20, help="timed round trips (default: 20)")
    parser.add_argument("--baseline", metavar="GIT_REF", help="also time the codecs of this git commit")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(measure(args.rows, args.k, args.repeat)))
        return
    results = {"current": measure(args.rows, args.k, args.repeat)}
    if args.baseline:
        environment = {**os.environ, "PYTHONPATH": extract_baseline(args.baseline)}
        command = [
            sys.executable,
            __file__,
            "--worker",
            "--rows",
            str(args.rows),
            "--k",
            str(args.k),
            "--repeat",
            str(args.repeat),
        ]
        completed = subprocess.run(command, capture_output=True, text=True, env=environment, cwd=ROOT, check=True)
        results["baseline"] = json.loads(completed.stdout.strip().splitlines()[-1])
    print(f"{args.rows} x {args.k} float64 rows, GB/s of payload, one core")
    for name in CODED:
        now = results["current"]["rates"][name]
        line = f"{name:<5} encode {now['encode'] / 1e9:6.2f}  decode {now['decode'] / 1e9:6.2f}"
        if "baseline" in results:
            then = results["baseline"]["rates"][name]
            line += (
                f"   {args.baseline}: encode {then['encode'] / 1e9:6.2f}  decode {then['decode'] / 1e9:6.2f}"
                f"   speed-up {now['encode'] / then['encode']:.2f}x, {now['decode'] / then['decode']:.2f}x"
            )
        print(line)
    out = ROOT / "bench" / "results"
    out.mkdir(exist_ok=True)
    (out / "codec_rates.json").write_text(json.dumps({"baseline": args.baseline, **results}, indent=1))


if __name__ == "__main__":
    main()
