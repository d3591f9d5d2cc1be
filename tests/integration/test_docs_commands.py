"""The docs cannot drift from the program: every shell command in docs/getting-started.md
runs, in the documented order, against the local stack (the example stream started
first, then the generator, then the snapshot walkthrough); docs/cli.md's synopsis shows every
command and option the CLI has and nothing else; its examples are valid command lines and
print what they show; its JSON is the JSON the CLI prints."""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration


def code_blocks(doc: Path) -> list[list[str]]:
    """Fenced shell blocks (no language, sh, bash, console) as lists of logical lines."""
    blocks, current, lang = [], None, ""
    for line in doc.read_text().splitlines():
        if line.startswith("```"):
            if current is None:
                lang, current = line[3:].strip(), []
            else:
                if lang in ("", "sh", "bash", "console"):
                    blocks.append(current)
                current = None
            continue
        if current is not None:
            if current and current[-1].endswith("\\"):
                current[-1] = current[-1][:-1].rstrip() + " " + line.strip()
            else:
                current.append(line)
    return blocks


CAUGHT_UP = """
import sys, time
from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader
from airflow_provider_streamstate.engine.kafka.offsets import broker_offsets
deadline = time.monotonic() + 300
while time.monotonic() < deadline:
    try:
        offsets = CheckpointReader(sys.argv[1]).plan().kafka_offsets
        if offsets and all(p.behind == 0 for p in broker_offsets(sys.argv[2], offsets)):
            sys.exit(0)
    except Exception:
        pass
    time.sleep(1)
sys.exit("the stream did not catch up within 300 s")
"""


def walkthrough_script(stack, tmp: Path) -> str:
    """getting-started.md's commands as one bash script for this stack and these paths."""
    prefix = f"docs-{uuid.uuid4().hex[:8]}"
    subs = [
        ("http://127.0.0.1:PORT", stack.s3["primary"]["endpoint_url"]),
        ("127.0.0.1:PORT", stack.kafka_bootstrap),
        ("s3://streamstate/snapshots", f"s3://streamstate/{prefix}"),
        ("file:///var/tmp/snapshots", f"file://{tmp}/snapshots"),
        ("/tmp/ckpt", str(tmp / "ckpt")),
        ("/tmp/clone", str(tmp / "clone")),
        ("/tmp/expected.json", str(tmp / "expected.json")),
        ("--state-dir DIR", f"--state-dir {stack.state_dir}"),
    ]
    lines = ["set -euo pipefail", f"cd {shlex.quote(str(REPO))}", "STREAM_PID="]
    started = False
    for block in code_blocks(REPO / "docs" / "getting-started.md"):
        pending = ""
        for raw in block:
            cmd = (pending + " " + raw.split("  #")[0].strip()).strip()
            try:
                shlex.split(cmd)
            except ValueError:  # a quote still open: the command goes on on the next line
                pending = cmd
                continue
            pending = ""
            if not cmd or cmd.startswith("#"):
                continue
            if cmd.startswith("make ") or "dev/stack.py up" in cmd or "dev/stack.py down" in cmd:
                continue  # set-up is what runs this test; the stack is the test's own
            if " [" in cmd:
                continue  # a synopsis, not a command
            for old, new in subs:
                cmd = cmd.replace(old, new)
            if "dev/stack.py" in cmd and "--state-dir" not in cmd:
                cmd += f" --state-dir {stack.state_dir}"
            if cmd.startswith("spark-submit"):
                # The stream runs until it is stopped: start it in the background, as a reader would.
                lines.append(f"{cmd} > {tmp}/stream.log 2>&1 &")
                lines.append("STREAM_PID=$!")
                started = True
                continue
            if "jobs.check_state" in cmd:
                # "Once the stream has caught up": its committed offsets reach the brokers' ends.
                lines.append(f"{shlex.quote(sys.executable)} -c {shlex.quote(CAUGHT_UP)} {tmp}/ckpt {stack.kafka_bootstrap}")
            if cmd.startswith("$S ") and not any(line.startswith("# waited") for line in lines):
                # "With a stream running": wait for its first committed batch.
                lines.append("# waited")
                lines.append(f"for i in $(seq 240); do ls {tmp}/ckpt/commits/0 >/dev/null 2>&1 && break; sleep 1; done")
            lines.append(cmd)
    assert started, "getting-started.md no longer starts the example stream"
    # Ctrl-C as the docs say, to the Python driver (spark-submit's child; the JVM of a
    # background job ignores SIGINT anyway): the stream must stop cleanly, exit 0.
    lines.append('if [ -n "$STREAM_PID" ]; then pkill -INT -P "$STREAM_PID"; wait "$STREAM_PID"; fi')
    return "\n".join(lines) + "\n"


def test_getting_started_runs_as_written(stack, tmp_path) -> None:
    script = walkthrough_script(stack, tmp_path)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, timeout=900)
    log = (tmp_path / "stream.log").read_text() if (tmp_path / "stream.log").exists() else ""
    assert proc.returncode == 0, f"{script}\n--- stdout\n{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-3000:]}\n--- stream\n{log[-3000:]}"
    assert "Traceback" not in proc.stderr and "Traceback" not in log
    assert "state equals the expected aggregates" in proc.stdout
    assert "stopping the query" in log and "batch 0:" in log
    assert (tmp_path / "clone" / "metadata").exists()

    # The same check fails, naming the accounts, when the state is not what was expected.
    expected = json.loads((tmp_path / "expected.json").read_text())
    account = sorted(expected)[0]
    expected[account]["count"] += 1
    (tmp_path / "tampered.json").write_text(json.dumps(expected))
    check = subprocess.run([sys.executable, "-m", "airflow_provider_streamstate.jobs.check_state", "--checkpoint",
                            str(tmp_path / "ckpt"), "--expected", str(tmp_path / "tampered.json")],
                           capture_output=True, text=True, env=env, timeout=300)
    assert check.returncode == 1, check.stderr[-2000:]
    assert f"state differs from the expected aggregates in 1 of {len(expected)} accounts" in check.stderr
    assert f"  {account}: expected {expected[account]}" in check.stderr


def _cli_commands() -> dict[str, object]:
    """Every leaf command of the CLI ("snapshot create", "gc", ...) -> its argparse parser."""
    from airflow_provider_streamstate.cli import build_parser

    parser = build_parser()
    commands = {}
    for action in parser._subparsers._group_actions:  # noqa: SLF001 - argparse keeps them here
        for name, sub in action.choices.items():
            if sub._subparsers is not None:  # noqa: SLF001
                for group in sub._subparsers._group_actions:  # noqa: SLF001
                    for sub_name, leaf in group.choices.items():
                        commands[f"{name} {sub_name}"] = leaf
            else:
                commands[name] = sub
    return commands


def _options(command, *, hidden: bool = False) -> set[str]:  # noqa: ANN001 - an argparse parser
    """Its options; `hidden`: also those --help does not show (old names still taken)."""
    return {o for a in command._actions for o in a.option_strings  # noqa: SLF001
            if hidden or a.help != argparse.SUPPRESS}


# Options every command takes, documented once under "Stores" and "Exit codes and errors".
COMMON_OPTIONS = {"-h", "--help", "--storage-conn-id", "--debug", "--verbose"}


def synopsis_lines(doc: Path) -> dict[str, str]:
    """The reference's synopsis block as {command: its whole line}, continuation lines joined."""
    commands = _cli_commands()
    lines: dict[str, str] = {}
    key = None
    for line in code_blocks(doc)[0]:
        words = line.split()
        if words and words[0] == "streamstate" and len(words) > 1 and not words[1].startswith("-"):
            key = " ".join(words[1:3]) if f"{words[1]} {words[2]}" in commands else words[1]
            lines[key] = line
        elif line.startswith(" ") and key is not None:
            lines[key] += " " + line.strip()
        else:
            key = None
    return lines


def test_every_command_and_option_of_the_cli_is_in_the_reference_and_nothing_else_is() -> None:
    from airflow_provider_streamstate.cli import build_parser

    commands = _cli_commands()
    text = (REPO / "docs" / "cli.md").read_text()
    documented = synopsis_lines(REPO / "docs" / "cli.md")
    assert set(documented) == set(commands), f"undocumented: {set(commands) - set(documented)}"
    for key, line in documented.items():
        shown = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", line))
        known = _options(commands[key]) - COMMON_OPTIONS
        assert shown <= _options(commands[key]), f"docs/cli.md shows {shown - _options(commands[key])} for `{key}`"
        assert known <= shown, f"`streamstate {key}` has {known - shown}, which its synopsis line does not show"
    for opt in re.findall(r"`(--[a-z][a-z-]*)", text):
        assert any(opt in _options(p, hidden=True) for p in commands.values()) or opt in _options(build_parser()), (
            f"docs/cli.md names {opt}, which no command has")


def test_the_examples_in_the_cli_reference_parse_and_the_retention_example_prints_what_it_shows(tmp_path) -> None:
    """Every `$ streamstate ...` example is a valid command line; the retention example, run
    on a store holding the snapshots it shows, prints exactly its lines (ages aside)."""
    from airflow_provider_streamstate.backends.local.store import LocalStore
    from airflow_provider_streamstate.cli import build_parser
    from tests.unit.store_history import at, put_snapshot

    doc = (REPO / "docs" / "cli.md").read_text().splitlines()
    examples = [(i, line[2:]) for i, line in enumerate(doc) if line.startswith("$ streamstate ")]
    assert len(examples) >= 2
    for _, cmd in examples:
        build_parser().parse_args(shlex.split(cmd)[1:])  # exits (a test failure) on a bad line

    i, cmd = next((i, c) for i, c in examples if c.startswith("streamstate retention apply"))
    shown = []
    for line in doc[i + 1:]:
        if line.startswith("```"):
            break
        shown.append(line)
    store = LocalStore(tmp_path / "snapshots", fsync=False)
    for b in range(4):
        put_snapshot(store, "orders", b, at(f"2026-11-1{b}T00:00"))
    exe = str(Path(sys.executable).parent / "streamstate")
    proc = subprocess.run([exe, *shlex.split(cmd.replace("/data/snapshots", str(store.root)))[1:]],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    def ageless(lines: list[str]) -> list[str]:
        return [re.sub(r"\d+(\.\d+)?d old", "Nd old", x).rstrip() for x in lines]
    assert ageless(proc.stdout.splitlines()) == ageless(shown)


def test_the_json_the_cli_reference_shows_is_the_json_the_cli_prints(tmp_path) -> None:
    from tests.unit.fake_checkpoint import make_checkpoint, store_dirs, write

    ckpt = make_checkpoint(tmp_path / "ckpt", batches=2)
    for d in store_dirs(ckpt):
        write(d / "1.delta", "a")
        write(d / "2.delta", "b")
    exe = str(Path(sys.executable).parent / "streamstate")
    out = subprocess.run([exe, "snapshot", "create", "--checkpoint", str(ckpt), "--store", str(tmp_path / "s"),
                          "--stream", "probe", "--json"], capture_output=True, text=True, check=True).stdout
    printed = json.loads(out)
    block = next(b for b in code_blocks_any(REPO / "docs" / "cli.md", "json") if '"bytes_uploaded"' in "\n".join(b))
    shown = json.loads("\n".join(block))
    assert set(shown) == set(printed)


def code_blocks_any(doc: Path, lang: str) -> list[list[str]]:
    blocks, current = [], None
    for line in doc.read_text().splitlines():
        if line.startswith("```"):
            if current is None and line[3:].strip() == lang:
                current = []
            elif current is not None:
                blocks.append(current)
                current = None
            continue
        if current is not None:
            current.append(line)
    return blocks
