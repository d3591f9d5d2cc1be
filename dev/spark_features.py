"""The state features of each Spark line, tried for real (dev/spark_features/probe.py).

    .venv/bin/python dev/spark_features.py [--line 3.5 ...] [--json]

Runs the probe with each installed line's spark-submit and Python (dev/spark_versions.py,
one JVM per line, a minute or two each on two cores) and prints a feature x line table:
`yes` (it ran, and what it wrote was read back), or `no: <Spark's error>`.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import spark_versions  # noqa: E402

PROBE = Path(__file__).resolve().parent / "spark_features" / "probe.py"


def probe(version: spark_versions.SparkVersion, timeout_s: float = 900) -> dict[str, object]:
    out = subprocess.run(version.submit_command(str(PROBE), jars=()), env=version.env(), capture_output=True,
                         text=True, timeout=timeout_s)
    for line in out.stdout.splitlines():
        if line.startswith("PROBE-RESULT "):
            return json.loads(line.removeprefix("PROBE-RESULT "))  # type: ignore[no-any-return]
    raise RuntimeError(f"the probe on Spark {version.line} printed no result (exit {out.returncode}): "
                       f"{out.stderr.strip().splitlines()[-1:] or ''}")


def cell(outcome: dict[str, object] | None) -> str:
    if outcome is None:
        return "-"
    if outcome.get("ok"):
        facts = {k: v for k, v in outcome.items() if k != "ok"}
        return "yes" + (f" {json.dumps(facts, sort_keys=True)}" if facts else "")
    return f"no: {outcome.get('error')}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--line", action="append", help="a line to probe (default: every installed one)")
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    versions = [spark_versions.get(x) for x in a.line] if a.line else [v for v in spark_versions.SUPPORTED
                                                                       if v.installed()]
    results = {v.line: probe(v.require()) for v in versions}
    if a.json:
        print(json.dumps(results, indent=1, sort_keys=True))
        return 0
    features = list(dict.fromkeys(f for r in results.values() for f in r))
    for feature in features:
        print(f"## {feature}")
        for line, r in results.items():
            print(f"  {line}: {cell(r.get(feature))}")  # type: ignore[arg-type]
    return 0


if __name__ == "__main__":
    sys.exit(main())
