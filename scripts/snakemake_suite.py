"""Differential CI stage: Snakemake's own test suite, local executor vs dask-slurm.

Runs the tests listed in tests/snakemake_suite/selection.txt from the sdist of the Snakemake
version installed in this interpreter, once with Snakemake's local executor and once with
the plugin's local mode, and compares. It fails (exit 1) when

* a test passes with the local executor but not with the plugin, unless
  tests/snakemake_suite/expected_failures.txt lists it with a reason;
* a test leaves a Dask scheduler, worker or supervisor process running (either pass);
* a selected test does not exist in this Snakemake version, a pass does not complete
  (pytest crash, usage error, stage time limit), or fewer than --min-local-passes
  selected tests pass with the local executor (a broken environment must not pass
  silently).

Tests that fail or are skipped with the local executor (optional packages, network, conda,
containers) are only reported. See tests/snakemake_suite/README.md.

Usage (from the repository root, with the project's venv):

    .venv/bin/python scripts/snakemake_suite.py                  # the whole stage
    .venv/bin/python scripts/snakemake_suite.py --only test01    # one test, both passes
    .venv/bin/python scripts/snakemake_suite.py --only test01 --pass dask-slurm
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SUITE = REPO / "tests" / "snakemake_suite"
PASSES = ("local", "dask-slurm")
TEST_FILE = "tests/tests.py"
#: Command-line fragments of the plugin's long-lived processes (see dask_slurm_run.py).
DASK_MARKERS = ("distributed.cli.dask_scheduler", "distributed.cli.dask_worker")
#: The plugin's supervisor (``python -m snakemake_executor_plugin_dask_slurm[.worker].supervisor``,
#: one per worker), whichever subpackage it lives in.
SUPERVISOR = re.compile(r"snakemake_executor_plugin_dask_slurm(?:\.\w+)*\.supervisor\b")


def is_dask_process(cmd: str) -> bool:
    """Whether a command line is a Dask scheduler, worker or the plugin's supervisor."""
    return any(m in cmd for m in DASK_MARKERS) or SUPERVISOR.search(cmd) is not None


SESSION_VAR = "SNAKEMAKE_SUITE_SESSION"
#: Environment variables that would change what the tests do: CI makes Snakemake's tests
#: assume a network connection (tests/common.py is_connected); a SLURM allocation or a
#: profile would change how Snakemake or the plugin run.
DROP_ENV = ("CI", "SNAKEMAKE_PROFILE", "PYTEST_ADDOPTS")
DROP_ENV_PREFIXES = ("SLURM_", "SNAKEMAKE_DASK_SLURM_")


def log(msg: str) -> None:
    print(f"[snakemake-suite] {msg}", flush=True)


# -- inputs --------------------------------------------------------------------------------


def normalize(test: str) -> str:
    """``test01`` or ``tests.py::test01`` -> ``tests/tests.py::test01``."""
    test = test.strip()
    if "::" not in test:
        return f"{TEST_FILE}::{test}"
    path, rest = test.split("::", 1)
    if path in ("tests.py", "tests/tests.py"):
        return f"{TEST_FILE}::{rest}"
    return test


def read_selection(path: Path) -> list[str]:
    ids: list[str] = []
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            ids.append(normalize(line))
    dupes = sorted({t for t in ids if ids.count(t) > 1})
    if dupes:
        raise SystemExit(f"{path}: listed more than once: {', '.join(dupes)}")
    return ids


def read_expected(path: Path) -> dict[str, str]:
    """``test id <whitespace> reason`` per line; ``#`` starts a comment line."""
    expected: dict[str, str] = {}
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = line.strip().split(None, 1)
        if len(parts) < 2 or not parts[1].strip():
            raise SystemExit(f"{path}:{n}: an expected failure needs a reason: {line!r}")
        expected[normalize(parts[0])] = parts[1].strip()
    return expected


def snakemake_version(python: str) -> str:
    out = subprocess.run(
        [python, "-c", "import snakemake; print(snakemake.__version__)"],
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout.strip()


def fetch_sdist(python: str, version: str, cache: Path, given: Path | None) -> Path:
    """The sdist of ``version`` in ``cache`` (copied from ``given``, or pip-downloaded)."""
    target = cache / f"snakemake-{version}.tar.gz"
    if target.is_file():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    if given is not None:
        shutil.copyfile(given, target)
        return target
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        argv = [python, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]
        argv += ["--dest", tmp, f"snakemake=={version}"]
        log("downloading the sdist: " + " ".join(argv[1:]))
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
        found = sorted(Path(tmp).glob("snakemake-*.tar.gz"))
        if len(found) != 1:
            raise SystemExit(f"pip download gave {found}, expected one snakemake-*.tar.gz")
        shutil.move(str(found[0]), target)
    return target


def extract(sdist: Path, version: str, dest: Path) -> Path:
    """A fresh copy of the sdist (some tests write into their test directories)."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    with tarfile.open(sdist) as tar:
        tar.extractall(dest, filter="data")
    roots = [p for p in dest.iterdir() if p.is_dir()]
    if len(roots) != 1 or not (roots[0] / TEST_FILE).is_file():
        raise SystemExit(f"{sdist}: no {TEST_FILE} in a single top directory")
    pkg_info = (roots[0] / "PKG-INFO").read_text(errors="replace")
    m = re.search(r"^Version: (\S+)", pkg_info, re.M)
    if not m or m.group(1) != version:
        raise SystemExit(f"{sdist} is version {m and m.group(1)}, not {version}")
    return roots[0]


# -- running pytest -------------------------------------------------------------------------


def base_env(session: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in DROP_ENV and not k.startswith(DROP_ENV_PREFIXES)
    }
    env["PYTHONPATH"] = str(SUITE)
    # Rules and tests call `snakemake` and `python` by name: this interpreter's first, as
    # in an activated venv.
    bindir = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join([bindir, env.get("PATH", os.defpath)])
    env[SESSION_VAR] = session
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def collect(python: str, root: Path, env: dict[str, str]) -> set[str]:
    out = subprocess.run(
        [
            python,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-o",
            "addopts=",
            "--collect-only",
            "-q",
            TEST_FILE,
        ],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    ids = {line.strip() for line in out.stdout.splitlines() if line.startswith(TEST_FILE + "::")}
    if not ids:
        raise SystemExit(
            f"collecting {TEST_FILE} failed:\n{out.stdout[-3000:]}{out.stderr[-3000:]}"
        )
    return ids


@dataclass
class PassResult:
    name: str
    seconds: float
    exitstatus: int | None
    tests: dict[str, dict] = field(default_factory=dict)
    problem: str = ""  # the pass did not complete properly
    stray: list[str] = field(default_factory=list)  # Dask processes left after the pass


def run_pass(
    name: str,
    python: str,
    root: Path,
    ids: list[str],
    env: dict[str, str],
    out_dir: Path,
    timeout: int,
    pass_timeout: int,
    jobs: int,
    quiet: bool,
) -> PassResult:
    results = out_dir / f"{name}.json"
    tmp = out_dir / f"tmp-{name}"
    tmp.mkdir(parents=True, exist_ok=True)
    results.unlink(missing_ok=True)
    env = dict(env)
    env.update(
        SNAKEMAKE_SUITE_EXECUTOR=name,
        SNAKEMAKE_SUITE_RESULTS=str(results),
        SNAKEMAKE_SUITE_TMP=str(tmp),
        SNAKEMAKE_SUITE_JOBS=str(jobs),
    )
    argv = [python, "-m", "pytest", "-p", "dask_slurm_run", "-p", "no:cacheprovider"]
    argv += [f"--timeout={timeout}", "--timeout-method=signal", "-rfE"]
    argv += [f"--junitxml={out_dir / f'{name}.xml'}", "-o", "junit_family=xunit2"]
    argv += [f"--basetemp={out_dir / f'basetemp-{name}'}", *ids]
    log(f"pass {name}: {len(ids)} tests, up to {timeout} s each (log: {out_dir / name}.log)")
    started = time.monotonic()
    problem = ""
    with open(out_dir / f"{name}.log", "w") as logfile:
        proc = subprocess.Popen(
            argv,
            cwd=root,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
            start_new_session=True,  # so that the pass can be ended as a whole
        )
        expired = threading.Event()
        previous = signal.signal(signal.SIGTERM, _terminate(proc, env[SESSION_VAR]))

        def expire() -> None:
            expired.set()
            end_group(proc)

        watchdog = threading.Timer(pass_timeout, expire)
        watchdog.start()
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                logfile.write(line)
                if not quiet or re.search(r" (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)", line):
                    sys.stdout.write(line)
                    sys.stdout.flush()
            proc.wait()
        except KeyboardInterrupt:
            end_group(proc)
            raise
        finally:
            watchdog.cancel()
            signal.signal(signal.SIGTERM, previous)
        if expired.is_set():
            problem = f"the pass exceeded its time limit of {pass_timeout} s and was stopped"
    seconds = time.monotonic() - started
    result = PassResult(name, seconds, proc.returncode, problem=problem)
    if results.is_file():
        data = json.loads(results.read_text())
        result.tests = data.get("tests", {})
    elif not problem:
        result.problem = f"pytest exited with {proc.returncode} and wrote no results"
    if proc.returncode not in (0, 1) and not result.problem:
        # 2: interrupted, 3: internal error, 4: usage error, 5: no tests collected
        result.problem = f"pytest exited with {proc.returncode}"
    result.stray = stray_processes(env[SESSION_VAR])
    log(f"pass {name}: {seconds:.0f} s, pytest exit status {proc.returncode}")
    return result


def _terminate(proc: subprocess.Popen, session: str) -> Any:
    """A SIGTERM handler (CI cancelling the stage) that ends the running pass first (it
    runs in a session of its own, so nothing else would), then any Dask process of it."""

    def handler(signum: int, frame: Any) -> None:
        end_group(proc)
        stray_processes(session)
        raise SystemExit(128 + signum)

    return handler


def end_group(proc: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL, the process group of the pytest this script started."""
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def stray_processes(session: str) -> list[str]:
    """Dask processes started by this stage's pytest (its session id in their
    environment) still running after the pass; they are killed."""
    needle = f"{SESSION_VAR}={session}".encode()
    found: list[tuple[int, str]] = []
    deadline = time.monotonic() + 5
    while True:
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
                if not is_dask_process(cmd):
                    continue
                with open(f"/proc/{entry}/environ", "rb") as f:
                    if needle not in f.read().split(b"\0"):
                        continue
                with open(f"/proc/{entry}/stat", "rb") as f:
                    if f.read().rsplit(b")", 1)[1].split()[0] in (b"Z", b"X"):
                        continue
            except (OSError, IndexError):
                continue
            found.append((int(entry), cmd.strip()))
        if not found or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    for pid, _ in found:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return [f"{pid}: {cmd}" for pid, cmd in found]


# -- comparing -----------------------------------------------------------------------------


# -- the local pass, recorded once per Snakemake release ------------------------------------


def recording_path(version: str) -> Path:
    return SUITE / f"local-{version}.json"


def read_recording(version: str, ids: list[str]) -> PassResult | None:
    """The local pass recorded for this Snakemake ``version``, if it covers every test of
    ``ids`` (the local executor's outcomes depend on Snakemake and this machine's packages,
    not on the plugin)."""
    path = recording_path(version)
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    tests = data.get("tests", {})
    if data.get("snakemake") != version or any(t not in tests for t in ids):
        return None
    log(
        f"pass local: recorded for Snakemake {version} on {data.get('recorded', '?')} "
        f"({path.relative_to(REPO)}); --rerun-local runs it instead"
    )
    return PassResult("local", 0.0, 0, tests={t: tests[t] for t in ids})


def write_recording(version: str, run: PassResult, add: bool = False) -> None:
    """Record the local pass for ``version``; ``add``: only ``run``'s tests, into the
    recording there is (tests added to the selection, without running the whole pass)."""
    path = recording_path(version)
    kept = {
        test: {k: v for k, v in record.items() if k in ("outcome", "duration", "message")}
        for test, record in run.tests.items()
    }
    if add and path.is_file():
        old = json.loads(path.read_text())
        if old.get("snakemake") == version:
            kept = {**old.get("tests", {}), **kept}
    data = {
        "snakemake": version,
        "recorded": time.strftime("%Y-%m-%d"),
        "tests": dict(sorted(kept.items())),
    }
    path.write_text(json.dumps(data, indent=1) + "\n")
    log(f"pass local: recorded in {path.relative_to(REPO)}")


def short(test: str) -> str:
    return test.split("::", 1)[1] if test.startswith(TEST_FILE + "::") else test


def compare(
    ids: list[str],
    missing: list[str],
    expected: dict[str, str],
    runs: dict[str, PassResult],
    min_local: int,
    only: bool = False,
) -> int:
    local, plugin = runs.get("local"), runs.get("dask-slurm")
    problems: list[str] = []
    rows: list[tuple[str, str, str, str]] = []  # category, test, outcomes, detail
    counts = {"selected": len(ids) + len(missing)}

    def outcome(run: PassResult | None, test: str) -> str:
        if run is None:
            return "-"
        return (run.tests.get(test) or {}).get("outcome") or "not run"

    def message(run: PassResult | None, test: str) -> str:
        return ((run.tests.get(test) or {}).get("message") or "") if run else ""

    for name, run in runs.items():
        counts[f"pass {name}"] = sum(outcome(run, t) == "passed" for t in ids)
        if name == "dask-slurm":
            used = [run.tests.get(t, {}).get("dask_jobs", 0) for t in ids]
            counts["ran jobs on Dask"] = sum(n > 0 for n in used)
            counts["Dask jobs"] = sum(used)
        if run.problem:
            problems.append(f"pass {name}: {run.problem}")
        for test in ids:
            left = (run.tests.get(test) or {}).get("leftover") or []
            if left:
                problems.append(f"{short(test)} ({name}): Dask processes outlived it")
                rows.append(("LEFTOVER", test, name, "; ".join(left)[:300]))
        for stray in run.stray:
            problems.append(f"pass {name}: a Dask process outlived the pass: {stray}")
    for test in missing:
        problems.append(f"{short(test)}: not a test of this Snakemake version")
        rows.append(("MISSING", test, "", "remove it from selection.txt"))

    regressions = 0
    if local is not None and plugin is not None:
        for test in ids:
            lo, pl = outcome(local, test), outcome(plugin, test)
            pair = f"{lo} / {pl}"
            if lo == "passed" and pl != "passed":
                if test in expected:
                    rows.append(("expected", test, pair, expected[test]))
                else:
                    regressions += 1
                    problems.append(f"{short(test)}: passes locally, {pl} with dask-slurm")
                    rows.append(("REGRESSION", test, pair, message(plugin, test)))
            elif lo == "passed" and test in expected:
                rows.append(("stale?", test, pair, "listed as expected failure but passes"))
            elif lo != "passed":
                rows.append(("local " + lo, test, pair, message(local, test)))
        counts["regressions"] = regressions
        counts["expected failures"] = sum(r[0] == "expected" for r in rows)
    else:
        only_run = local or plugin
        for test in ids:
            oc = outcome(only_run, test)
            if oc != "passed":
                name = only_run.name if only_run else ""
                rows.append((oc, test, name, message(only_run, test)))
    for test in () if only else expected:
        if test not in ids and test not in missing:
            rows.append(("unused", test, "", "in expected_failures.txt, not selected"))
    if local is not None and counts["pass local"] < min_local:
        problems.append(
            f"only {counts['pass local']} selected tests pass with the local executor "
            f"(at least {min_local} required): is the environment complete?"
        )

    order = ["REGRESSION", "LEFTOVER", "MISSING", "expected", "stale?", "unused"]
    rows.sort(key=lambda r: (order.index(r[0]) if r[0] in order else len(order), r[1]))
    if rows:
        print()
        width = max(len(short(r[1])) for r in rows)
        cat_w = max(len(r[0]) for r in rows)
        pair_w = max(len(r[2]) for r in rows)
        print(f"{'what':<{cat_w}}  {'test':<{width}}  {'local / dask-slurm':<{pair_w}}  detail")
        for cat, test, pair, detail in rows:
            print(f"{cat:<{cat_w}}  {short(test):<{width}}  {pair:<{pair_w}}  {detail}")
    print()
    for name, run in runs.items():
        times = ", ".join(
            f"{short(t)} {d['duration']:.0f} s"
            for t, d in sorted(run.tests.items(), key=lambda kv: -kv[1]["duration"])[:5]
        )
        print(f"pass {name}: {run.seconds:.0f} s wall (slowest: {times})")
    print("counts: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    if problems:
        print("\nFAILED:")
        for p in problems:
            print(f"  - {p}")
        return 1
    print("OK")
    return 0


# -- main ----------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--only",
        action="append",
        metavar="TEST",
        help="run only this test (repeatable; e.g. test01 or "
        "tests/tests.py::test_x[param]); it need not be in the selection",
    )
    ap.add_argument("--pass", dest="passes", choices=("both", *PASSES), default="both")
    ap.add_argument("--timeout", type=int, default=120, help="seconds per test (pytest-timeout)")
    ap.add_argument(
        "--pass-timeout",
        type=int,
        default=1800,
        help="seconds for a whole pass before it is stopped",
    )
    ap.add_argument("--jobs", type=int, default=10, help="--jobs (nodes) given to dask-slurm")
    ap.add_argument(
        "--min-local-passes",
        type=int,
        default=150,
        help="fail if fewer selected tests pass locally (ignored with --only)",
    )
    ap.add_argument("--cache-dir", type=Path, default=REPO / ".cache" / "snakemake-suite")
    ap.add_argument(
        "--sdist", type=Path, help="use this Snakemake sdist instead of downloading it with pip"
    )
    ap.add_argument("--selection", type=Path, default=SUITE / "selection.txt")
    ap.add_argument("--expected", type=Path, default=SUITE / "expected_failures.txt")
    ap.add_argument("--quiet", action="store_true", help="print only one line per test")
    ap.add_argument(
        "--rerun-local",
        action="store_true",
        help="run the local pass even when it is recorded for this Snakemake version",
    )
    ap.add_argument(
        "--record-local",
        action="store_true",
        help="run the local pass and record it for this Snakemake version (the whole "
        "selection; with --only, those tests are added to the recording there is)",
    )
    args = ap.parse_args(argv)

    python = sys.executable
    version = snakemake_version(python)
    cache = args.cache_dir.resolve()
    sdist = fetch_sdist(python, version, cache, args.sdist)
    log(f"Snakemake {version}, sdist {sdist}")
    root = extract(sdist, version, cache / f"src-{version}")
    out_dir = cache / f"out-{version}"
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)

    env = base_env(uuid.uuid4().hex)
    available = collect(python, root, env)
    wanted = [normalize(t) for t in args.only] if args.only else read_selection(args.selection)
    ids = [t for t in wanted if t in available]
    missing = [t for t in wanted if t not in available]
    expected = read_expected(args.expected)
    min_local = 0 if args.only else args.min_local_passes

    passes = PASSES if args.passes == "both" else (args.passes,)
    runs: dict[str, PassResult] = {}
    started = time.monotonic()
    for name in passes:
        if not ids:
            break
        if name == "local" and not (args.rerun_local or args.record_local):
            recorded = read_recording(version, ids)
            if recorded is not None:
                runs[name] = recorded
                continue
            log(f"pass local: no recording for Snakemake {version}: running it (record it "
                "with --record-local to save this time in every later run)")  # fmt: skip
        runs[name] = run_pass(
            name,
            python,
            root,
            ids,
            env,
            out_dir,
            args.timeout,
            args.pass_timeout,
            args.jobs,
            args.quiet,
        )
    if args.record_local and "local" in runs and not runs["local"].problem:
        write_recording(version, runs["local"], add=bool(args.only))
    log(f"both passes: {time.monotonic() - started:.0f} s; results in {out_dir}")
    return compare(ids, missing, expected, runs, min_local, only=bool(args.only))


if __name__ == "__main__":
    sys.exit(main())
