"""The warm path's pure parts: splitting Snakemake's job command as a shell would, the key
of one parse, the end-of-run line, the marker's size, the fingerprint; and the pin on the
Snakemake internals it uses (fails loudly on a release that changes them)."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import pytest

from snakemake_executor_plugin_dask_slurm.dispatch.cold_ways import ColdWays
from snakemake_executor_plugin_dask_slurm.dispatch.general_command import parsed
from snakemake_executor_plugin_dask_slurm.dispatch.way import Facts, Warm, decide
from snakemake_executor_plugin_dask_slurm.warm import command as command_module
from snakemake_executor_plugin_dask_slurm.warm import marker, snakemake_side
from snakemake_executor_plugin_dask_slurm.warm.command import (
    Unsplittable,
    parse_job_command,
    split_words,
)
from snakemake_executor_plugin_dask_slurm.warm.sources import Fingerprint, stamp
from snakemake_executor_plugin_dask_slurm.worker.wire import Cold, Why

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("command", "words"),
    [
        ("a b  c", ["a", "b", "c"]),
        ("--x 'it'\"'\"'s' y", ["--x", "it's", "y"]),  # shlex.quote of it's
        ("'$HOME' \"plain\"", ["$HOME", "plain"]),
        ("export A='1 2' && py -m snakemake", ["export", "A=1 2", "&&", "py", "-m", "snakemake"]),
        ("''", [""]),
        ("--set 'a=b' base64//x=", ["--set", "a=b", "base64//x="]),
    ],
)
def test_a_command_splits_as_a_shell_splits_it(command: str, words: list[str]) -> None:
    assert split_words(command) == words


@pytest.mark.parametrize(
    "command",
    [
        "echo $HOME",  # expansion
        'echo "$HOME"',
        "echo `id`",
        "echo a\\ b",  # escape
        "echo *.txt",  # glob
        "echo ~/x",  # tilde
        "a; b",
        "a | b",
        "a & b",
        "a && b&&c",
        "a # comment",
        "echo 'open",
        'echo "open',
    ],
)
def test_anything_a_shell_would_interpret_is_refused(command: str) -> None:
    with pytest.raises(Unsplittable):
        split_words(command)


def test_the_fast_split_is_the_character_by_character_one() -> None:
    """split_words reads the usual shape with regular expressions; on random text of the
    characters that matter it gives the same words, or the same refusal, as _split_slowly."""
    rng = random.Random(29)
    alphabet = [*"ab =/-_.\t\n$`\\*?[;|<>()#~\"'&", "&&", "'x y'", '"q r"', " && ", "''"]

    def outcome(split: Any, text: str) -> tuple[str, object]:
        try:
            return ("words", split(text))
        except Unsplittable as e:
            return ("refused", str(e))

    for _ in range(20000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 14)))
        assert outcome(split_words, text) == outcome(command_module._split_slowly, text), text


def test_a_job_command_gives_its_interpreter_arguments_and_exports() -> None:
    found = parse_job_command(
        "export A='x' B='y z' && /venv/bin/python -m snakemake --snakefile '/w/Snakefile' "
        "--target-jobs 'r:name=with space' --mode 'remote'"
    )
    assert found.python == "/venv/bin/python" and found.module == "snakemake"
    assert found.argv == (
        "--snakefile", "/w/Snakefile", "--target-jobs", "r:name=with space", "--mode", "remote",
    )  # fmt: skip
    assert found.exports == (("A", "x"), ("B", "y z")) and found.cd is None
    member = parse_job_command("cd '/w' && /venv/bin/python -m snakemake --mode 'subprocess'")
    assert member.cd == "/w" and member.argv == ("--mode", "subprocess")


def test_a_members_request_names_the_group_job_it_is_given() -> None:
    from snakemake_executor_plugin_dask_slurm.warm import member

    command = "cd '/w' && export A='1' && /venv/bin/python -m snakemake --mode 'subprocess'"
    first, second = member.request_for(command, "g"), member.request_for(command, "g")
    assert not isinstance(first, Cold) and not isinstance(second, Cold)
    assert first["marker"] == "g" and first["key"].startswith("g/member")
    assert first["key"] != second["key"] and first["cwd"] == "/w"
    assert ("A", "1") in first["env"] and first["argv"] == ["--mode", "subprocess"]
    no_cd = member.request_for("python -m snakemake", "g")  # spawned as before
    assert no_cd == Cold(Why.MEMBER_COMMAND, "no `cd DIR &&` before it")
    found = member.request_for("cd /w && python -m other", "g")
    assert isinstance(found, Cold) and found.why is Why.MEMBER_COMMAND
    found = member.request_for("cd /w && python -m snakemake | tee x", "g")
    assert isinstance(found, Cold) and found.why is Why.MEMBER_COMMAND


@pytest.mark.parametrize(
    "command",
    [
        "pip install x && python -m snakemake --mode remote",  # a precommand
        "export 1A=x && python -m snakemake",
        "python snakemake.py --mode remote",
        "cd rel && python -m snakemake",
    ],
)
def test_other_shapes_of_command_go_the_cold_way(command: str) -> None:
    assert isinstance(decide(Facts(False, True, command=parsed(command))), Cold)


def test_a_group_runner_command_goes_warm() -> None:
    command = "/p -m snakemake_executor_plugin_dask_slurm.dispatch.group_runner --cores 2"
    way = decide(Facts(True, True, group=True, command=parsed(command)))
    assert isinstance(way, Warm) and way.command.argv == ("--cores", "2")


NARGS = {
    "--target-jobs": "+",
    "--allowed-rules": "+",
    "--local-groupid": None,
    "--attempt": None,
    "--force-use-threads": 0,
    "--unneeded-temp-files": "*",
    "--wait-for-files": "*",
    "--wait-for-files-file": None,
}


def test_the_key_of_a_parse_leaves_out_exactly_the_per_job_arguments() -> None:
    one = [
        "--snakefile", "/w/S", "--target-jobs", "a:i=1", "b:i=-1", "--allowed-rules", "a", "b",
        "--local-groupid", "g1", "--cores", "2", "--attempt", "1", "--force-use-threads",
        "--unneeded-temp-files", "t1", "t2", "--wait-for-files", "/tmp/x", "--force",
        "--config", "k=v", "--mode", "remote",
    ]  # fmt: skip
    other = [
        "--snakefile", "/w/S", "--target-jobs", "c:i=2", "--allowed-rules", "c", "--cores",
        "2", "--attempt", "3", "--wait-for-files=/tmp/y", "--force", "--config", "k=v",
        "--mode", "remote",
    ]  # fmt: skip
    key = snakemake_side.parse_key(one, NARGS)
    assert key == (
        "--snakefile", "/w/S", "--cores", "2", "--force", "--config", "k=v", "--mode", "remote",
    )  # fmt: skip
    assert snakemake_side.parse_key(other, NARGS) == key
    changed = [*other[:-3], "k=w", "--mode", "remote"]
    assert snakemake_side.parse_key(changed, NARGS) != key


def test_the_end_of_run_line_counts_each_reason() -> None:
    ways = ColdWays()
    assert ways.line() is None
    whys = [Why.WARM_OFF, Why.NEEDS_SHELL, Why.WARM_OFF, *list(Why)[-6:]]
    for why in whys:
        ways.add(Cold(why))
    line = ways.line()
    assert line is not None and line.startswith("9 jobs went the cold way")
    assert (
        "2 because the warm path is turned off (--dask-slurm-no-warm); "
        "1 because its job command needs a shell;"
    ) in line
    assert line.endswith("3 for 3 other reason(s)")
    single = ColdWays()
    single.add(Cold(Why.NOT_SNAKEMAKE, "pip"))
    assert single.line() == (
        "1 job went the cold way (a fresh Snakemake each): "
        "1 because its job command does not run Snakemake (pip)"
    )


def test_the_end_of_run_line_counts_a_reason_once_whatever_its_details() -> None:
    ways = ColdWays()
    for pid in (11, 12, 13):
        ways.add(Cold(Why.CANNOT_START, f"pid {pid}"))
    assert ways.line() == (
        "3 jobs went the cold way (a fresh Snakemake each): "
        "3 because the worker's warm process could not start (e.g. pid 11)"
    )


def test_a_marker_fits_the_slot_up_to_its_size() -> None:
    assert marker.fits("k" * (marker.SLOT_BYTES - len("DASK_SLURM_JOB=")))
    assert not marker.fits("k" * (marker.SLOT_BYTES - len("DASK_SLURM_JOB=") + 1))
    assert len(marker.SLOT_VARIABLE) + 1 + len(marker.slot_value()) == marker.SLOT_BYTES


def test_a_fingerprint_sees_a_file_changed_replaced_created_or_removed(tmp_path: Path) -> None:
    a, b, gone, later = (tmp_path / n for n in ("a", "b", "gone", "later"))
    a.write_text("1")
    b.write_text("1")
    gone.write_text("1")
    paths = {str(p): stamp(str(p)) for p in (a, b, gone, later)}
    print_ = Fingerprint.of(paths, {}, [], skip=())
    assert print_.changed() is None and len(print_) == 4
    os.utime(a, ns=(1, 1))
    assert print_.changed() == str(a)
    for made in (
        lambda: (b.unlink(), b.write_text("1")),  # replaced: another inode
        lambda: gone.unlink(),
        lambda: later.write_text("new"),
    ):
        fresh = Fingerprint.of({str(p): stamp(str(p)) for p in (b, gone, later)}, {}, [])
        made()
        assert fresh.changed() is not None
    skipped = Fingerprint.of({str(a): None}, {}, [], skip=(str(tmp_path) + "/",))
    assert len(skipped) == 0


def test_the_snakemake_internals_the_warm_path_uses_are_there() -> None:
    """If this fails, a Snakemake release changed what warm/snakemake_side.py relies on:
    the warm path then refuses to start and every job goes the cold way (still correct,
    but slow); adapt snakemake_side to the new release."""
    snakemake_side.check_internals()
    from snakemake.cli import get_argument_parser
    from snakemake.workflow import Workflow

    actions = get_argument_parser()._option_string_actions
    assert set(snakemake_side.PER_JOB_FLAGS) <= set(actions)
    fields = set(Workflow.__dataclass_fields__)
    assert {"logger_manager", "output_settings", "storage_settings", "start_time"} <= fields
    source = Path(Workflow.__post_init__.__code__.co_filename).read_text()
    for name in ("_snakemake_tmp_dir", "_async_runners", "_async_executor", "_async_lock"):
        assert f"self.{name} =" in source, name


def test_a_groups_warm_members_are_counted_as_wait4_would_count_its_children() -> None:
    """(cpu seconds, peak RSS, RSS floor): CPU adds up, the larger peak wins with its own
    floor; a member's figures go to its group job, and a job without members is unchanged."""
    from snakemake_executor_plugin_dask_slurm.warm.tasks import Tasks, together

    assert together(None, [1.5, 300, 80]) == (1.5, 300, 80)
    assert together((1.5, 300, 80), [0.25, 90, 85]) == (1.75, 300, 80)
    assert together((0.25, 90, 85), (1.5, 300, 80)) == (1.75, 300, 80)
    tasks = Tasks()  # the zygote's bookkeeping alone: no socket, no fork
    for member in ("g/member1-7", "g/member2-7"):
        tasks.open(member).group = "g"
    tasks.open("g")
    assert tasks.add_members("g/member1-7", [0.5, 200, 90]) == [0.5, 200, 90]
    assert tasks.add_members("g/member2-7", [0.5, 100, 90]) == [0.5, 100, 90]
    tasks.add_used("g", (0.25, 50, 90))  # a warm script of the group job
    assert tasks.add_members("g", [0.25, 150, 95]) == (1.5, 200, 90)
    assert tasks.add_members("other", [0.25, 150, 95]) == [0.25, 150, 95]
    assert tasks.add_members("g/member3-7", None) is None  # not a member: left as it is
    assert all(task.group is None and task.used is None for _, task in tasks)


def test_a_task_record_lives_from_its_request_until_its_end_is_relayed(tmp_path: Path) -> None:
    from snakemake_executor_plugin_dask_slurm.warm.tasks import Tasks

    tasks = Tasks()
    record = tasks.open("m")
    assert tasks.open("m") is record and tasks.origin("m") is None  # the worker's
    read, write = os.pipe()
    record.fds, record.request = [read, write], {"key": "m"}
    assert tasks.take_request("m") == {"key": "m"} and tasks.take_request("m") is None
    tasks.settle("m")  # started: the descriptors it came with are closed
    assert record.fds == []
    with pytest.raises(OSError):
        os.fstat(read)
    tasks.end("m")
    assert tasks.get("m") is None and list(tasks) == []
    tasks.settle("gone")  # nothing to settle: no record made
    assert tasks.get("gone") is None


def test_a_command_whose_sources_keep_changing_goes_cold() -> None:
    from snakemake_executor_plugin_dask_slurm.warm.tasks import STALE_LIMIT, Command

    command = Command(server=42)
    for _ in range(STALE_LIMIT):
        command.changed("/w/config.yaml")
    assert command.refused is None and command.stale == STALE_LIMIT
    command.changed("/w/config.yaml")
    assert command.refused == Cold(
        Why.SOURCES_CHANGED, f"{STALE_LIMIT + 1} times; last: /w/config.yaml"
    )


def test_a_request_goes_cold_from_another_directory_interpreter_or_with_a_marker(
    tmp_path: Path,
) -> None:
    import sys

    from snakemake_executor_plugin_dask_slurm.warm.tasks import command_key, refusal

    request = {"key": "k", "argv": ["--cores", "2", "--attempt", "1"], "env": [], "cwd": "."}
    here = str(tmp_path)
    assert refusal(dict(request, cwd=here), None, here) is None
    assert refusal(dict(request, cwd=here, python=sys.executable), None, here) is None
    assert refusal(request, None, here) == Cold(
        Why.OTHER_CWD, f".; the warm process runs in {here}"
    )
    found = refusal(dict(request, cwd=here, python="/other/python"), None, here)
    assert found == Cold(Why.OTHER_PYTHON, f"/other/python; the warm process runs {sys.executable}")
    found = refusal(dict(request, cwd=here, key="k" * 600), None, here)
    assert found is not None and found.why is Why.KEY_TOO_LONG
    found = refusal(dict(request, cwd=here, env=[["DASK_SLURM_JOB", "x"]]), None, here)
    assert found == Cold(Why.ENV_SETS_MARKER, "DASK_SLURM_JOB")
    again = dict(request, key="other", argv=["--cores", "2", "--attempt", "2"])
    assert command_key(again, NARGS) == command_key(request, NARGS)
    assert command_key(dict(request, env=[["A", "1"]]), NARGS) != command_key(request, NARGS)


def test_one_reaper_hands_on_ended_scripts_and_keeps_a_servers_end() -> None:
    """The zygote's children, reaped in one loop: a script's status and figures are handed
    on; a server's end, in words, waits on it until its socket's end is read. (In a fork
    of the test's process, whose reaper would take any child of pytest's.)"""
    import socket
    import time
    import traceback

    from snakemake_executor_plugin_dask_slurm.warm.children import (
        Children,
        Script,
        ServerRecord,
    )
    from snakemake_executor_plugin_dask_slurm.worker.warm_protocol import Outbox

    def child(code: int) -> int:
        pid = os.fork()
        if pid == 0:  # pragma: no cover (the child)
            os._exit(code)
        return pid

    def check() -> None:
        children = Children()
        mine, theirs = socket.socketpair()
        script = Script(child(3), "k/script1-9", "k", Outbox(mine))
        server = ServerRecord(child(5), theirs, "command")
        children.add(script)
        children.add(server)
        server.running.add("k")
        assert children.runs("k") and children.servers() == [server]
        deadline, ended = time.monotonic() + 5, []
        while not ended and time.monotonic() < deadline:
            ended += children.reap()
            time.sleep(0.01)
        assert ended == [script] and script.status is not None and script.rusage is not None
        assert os.waitstatus_to_exitcode(script.status) == 3
        assert children.server_ended(server) == "exited with code 5"
        assert children.servers() == [server]  # until its socket's end is read
        children.remove(server)
        assert children.table == {} and children.reap() == []

    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        try:
            check()
            os._exit(0)
        except BaseException:
            traceback.print_exc()
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "see the traceback above"


# -- a warm job's Python script (warm/script.py) --------------------------------------------


def test_the_snakemake_code_a_warm_script_relies_on_is_the_one_it_was_written_for() -> None:
    """If this fails, a Snakemake release changed ``PythonScript.execute_script``,
    ``ScriptBase._execute_cmd`` or ``shell()``: warm jobs' scripts then run through the
    shell again (still correct, slower); check warm/script.py against the new code and
    record the new fingerprint in ``snakemake_internals.script.SCRIPT_HOOK``."""
    from snakemake_executor_plugin_dask_slurm.snakemake_internals.script import SCRIPT_HOOK

    assert SCRIPT_HOOK.matches()


@pytest.mark.parametrize(
    ("deployment", "reason"),
    [
        ({}, None),
        ({"container_img": "docker://x"}, "container"),
        ({"conda_env": "/envs/a"}, "conda"),
        ({"env_modules": ["m"]}, "modules"),
        ({"bench_record": object()}, "benchmarked"),
        ({"edit": True}, "edited"),
    ],
)
def test_a_script_may_run_warm_only_with_this_interpreter_and_no_benchmark(
    deployment: dict[str, object], reason: str | None
) -> None:
    from types import SimpleNamespace

    from snakemake_executor_plugin_dask_slurm.snakemake_internals.deployment import (
        script_bench_record,
    )
    from snakemake_executor_plugin_dask_slurm.snakemake_internals.script import software_reason
    from snakemake_executor_plugin_dask_slurm.warm.script import why_script_not_warm

    given = {"container_img": None, "conda_env": None, "env_modules": None, "bench_record": None}
    given.update(deployment)
    edit = bool(given.pop("edit", False))
    script = SimpleNamespace(**given)  # the attributes of Snakemake 9's PythonScript
    found = why_script_not_warm(software_reason(script), script_bench_record(script), edit)
    assert found is None if reason is None else (found is not None and reason in found)


def test_the_command_is_the_one_snakemake_formats_for_a_script() -> None:
    from snakemake.shell import shell
    from snakemake.utils import format

    from snakemake_executor_plugin_dask_slurm.warm.script import expected_command

    fname = ".snakemake/scripts/tmp a'b.py"
    command = format("{py_exec} {fname:q}", py_exec="/v/bin/python", fname=fname)
    default = " ".join((shell._get_process_prefix("/usr/bin/bash"), command, "")).strip()
    assert expected_command("/v/bin/python", fname) == default


POPEN = {
    "bufsize": -1,
    "shell": True,
    "stdout": None,
    "universal_newlines": None,
    "close_fds": True,
    "executable": "/usr/bin/bash",
    "env": {"PATH": "/bin"},
}


@pytest.mark.parametrize(
    ("command", "changes", "refused"),
    [
        ("set -euo pipefail;  /p/python /s.py", {}, False),
        ("set -euo pipefail;  /p/python /s.py; echo done", {}, True),  # shell.suffix
        ("set -e; /p/python /s.py", {}, True),  # shell.prefix
        ("set -euo pipefail;  /p/python /s.py", {"executable": "/bin/zsh"}, True),
        ("set -euo pipefail;  /p/python /s.py", {"stdout": -1}, True),  # read=True
        ("set -euo pipefail;  /p/python /s.py", {"universal_newlines": True}, True),
        ("set -euo pipefail;  /p/python /s.py", {"cwd": "/"}, True),
        ("set -euo pipefail;  python /s.py", {}, True),  # another interpreter
    ],
)
def test_only_the_default_shell_command_of_the_script_is_forked_warm(
    command: str, changes: dict[str, object], refused: bool
) -> None:
    from snakemake_executor_plugin_dask_slurm.warm.script import why_popen_not_warm

    kwargs = dict(POPEN, **changes)
    found = why_popen_not_warm(
        (command,), kwargs, python="/p/python", fname="/s.py", bash="/usr/bin/bash", stdout=None
    )
    assert (found is not None) == refused, found


@pytest.mark.parametrize(
    "env",
    [
        {},
        {"SHLVL": "3", "_": "/bin/other", "OLDPWD": "/tmp"},
        {"SHLVL": "", "PWD": "/"},
        {"SHLVL": "007", "PWD": "CWD"},
        {"PWD": "relative"},
        {"A": "with spaces and 'quotes' $X", "EMPTY": ""},
    ],
)
def test_the_script_gets_the_environment_bash_gives_it(env: dict[str, str], tmp_path: Path) -> None:
    """The environment the script's process gets warm is what Snakemake's shell gives
    ``python FILE`` (``Popen(cmd, shell=True, executable=bash)``), checked against bash."""
    import json
    import shutil
    import subprocess
    import sys

    from snakemake_executor_plugin_dask_slurm.warm.script import bash_env

    bash = shutil.which("bash")
    assert bash is not None
    env = {k: str(tmp_path) if v == "CWD" else v for k, v in env.items()}
    env["PATH"] = os.environ["PATH"]
    dump = tmp_path / "dump.py"
    dump.write_text("import json, os, sys\njson.dump(dict(os.environ), sys.stdout)\n")
    command = f"set -euo pipefail;  {sys.executable} {dump}"
    done = subprocess.run(
        command, shell=True, executable=bash, env=env, cwd=tmp_path, stdout=subprocess.PIPE,
        check=True,
    )  # fmt: skip
    expected = json.loads(done.stdout)
    expected.pop("LC_CTYPE", None)  # the interpreter's own (C locale coercion), warm too
    assert bash_env(env, str(tmp_path), sys.executable) == expected


@pytest.mark.parametrize(
    "env",
    [
        {"BASH_ENV": "/x"},
        {"SHELLOPTS": "xtrace"},
        {"BASH_FUNC_f%%": "() { :; }"},
        {"A-B": "1"},
        {"SHLVL": "abc"},
        {"SHLVL": "-1"},
        {"SHLVL": "1000"},
        {"PWD": "CWD/."},
    ],
)
def test_an_environment_bash_would_change_more_goes_through_the_shell(
    env: dict[str, str], tmp_path: Path
) -> None:
    from snakemake_executor_plugin_dask_slurm.warm.script import bash_env

    env = {k: v.replace("CWD", str(tmp_path)) for k, v in env.items()}
    env["PATH"] = "/bin"
    assert isinstance(bash_env(env, str(tmp_path), "/p/python"), str)
    assert isinstance(bash_env({}, str(tmp_path), "/p/python"), str)  # no PATH


def test_the_zygote_runs_a_script_only_with_its_own_interpreter_settings() -> None:
    from snakemake_executor_plugin_dask_slurm.warm.script import why_zygote_cannot

    base = {"PATH": "/bin", "PYTHONUNBUFFERED": "1", "LANG": "C.UTF-8"}
    request = {"marker": "k", "env": [*base.items(), ("DASK_SLURM_JOB", "k"), ("X", "y")]}
    assert why_zygote_cannot(request, base, ["/w", "/lib"]) is None
    for name, value in (("PYTHONPATH", "/x"), ("PYTHONUNBUFFERED", None), ("LANG", "C")):
        env = dict(request["env"])  # type: ignore[arg-type]
        env[name] = value
        env = {k: v for k, v in env.items() if v is not None}
        found = why_zygote_cannot(dict(request, env=list(env.items())), base, ["/w"])
        assert found is not None and name in found
    assert why_zygote_cannot(dict(request, marker="other"), base, ["/w"]) is not None
    assert why_zygote_cannot(request, base, []) is not None


def test_a_script_run_warm_ends_as_the_interpreter_would(tmp_path: Path) -> None:
    """run_file in a fork: exit codes of SystemExit, an uncaught exception's traceback
    without the runner's frame, __main__ and argv (as ``python FILE``)."""
    import sys

    from snakemake_executor_plugin_dask_slurm.warm.script_run import fresh_stdio, run_file

    cases = {
        "import sys\nsys.exit(3)\n": (3, ""),
        "import sys\nsys.exit()\n": (0, ""),
        "import sys\nsys.exit('bye')\n": (1, "bye\n"),
        "def f():\n    raise KeyError('k')\nf()\n": (1, "KeyError: 'k'\n"),
        "import sys\nassert sys.argv == [__file__] and __name__ == '__main__'\n": (0, ""),
    }
    for source, (code, said) in cases.items():
        path = tmp_path / "s.py"
        path.write_text(source)
        err = tmp_path / "err"
        pid = os.fork()
        if pid == 0:  # pragma: no cover (the child)
            fd = os.open(err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(fd, 2)
            try:
                fresh_stdio()  # the streams on fds 0-2 (not pytest's capture)
                found, _ = run_file(str(path), list(sys.path))
                sys.stderr.flush()
            finally:
                os._exit(found if "found" in locals() else 99)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == code, source
        text = err.read_text()
        assert text.endswith(said), (source, text)
        if "Traceback" in text:
            assert "run_file" not in text and f'File "{path}", line 3, in <module>' in text


def test_a_scripts_exit_that_came_with_its_start_is_not_lost() -> None:
    """A quick script's ``exited`` can arrive in the same read as its ``started``; and a
    zygote that dies while it runs ends the wait (the worker reruns the job cold)."""
    import socket

    from snakemake_executor_plugin_dask_slurm.warm.script import WarmScript
    from snakemake_executor_plugin_dask_slurm.worker.warm_protocol import Inbox

    mine, theirs = socket.socketpair()
    with theirs:
        quick = WarmScript(mine, Inbox(), 1, "cmd", [{"op": "exited", "key": "k", "status": 3}])
        assert quick.wait() == 3 and quick.returncode == 3
    mine, theirs = socket.socketpair()
    theirs.close()  # the zygote died
    assert WarmScript(mine, Inbox(), 1, "cmd", []).wait() == 1


def test_a_warm_scripts_openblas_pool_is_sized_as_a_fresh_interpreter_would() -> None:
    """OpenBLAS's own rule (blas_get_cpu_number): OPENBLAS_NUM_THREADS, else
    GOTO_NUM_THREADS, else OMP_NUM_THREADS, the first positive one (atoi), at most the
    usable CPUs; none: every CPU."""
    from snakemake_executor_plugin_dask_slurm.warm.thread_pools import openblas_threads

    cases = [
        ({}, 8, 8),
        ({"OMP_NUM_THREADS": "1"}, 8, 1),
        ({"OMP_NUM_THREADS": "16"}, 8, 8),
        ({"OPENBLAS_NUM_THREADS": "2", "OMP_NUM_THREADS": "4"}, 8, 2),
        ({"OPENBLAS_NUM_THREADS": "0", "GOTO_NUM_THREADS": "3", "OMP_NUM_THREADS": "4"}, 8, 3),
        ({"OPENBLAS_NUM_THREADS": "x", "OMP_NUM_THREADS": "5"}, 8, 5),
        ({"OMP_NUM_THREADS": "4,2"}, 8, 4),
        ({"OMP_NUM_THREADS": " 2"}, 8, 2),
        ({"OMP_NUM_THREADS": "-1"}, 8, 8),
    ]
    for env, cpus, expected in cases:
        assert openblas_threads(env, cpus) == expected, env


def test_which_thread_pools_a_warm_script_can_have_resized() -> None:
    from snakemake_executor_plugin_dask_slurm.warm.thread_pools import (
        loaded_libraries,
        thread_pool_libraries,
    )

    maps = "\n".join(
        [
            "7f00-7f01 r-xp 00000000 08:01 1 /venv/numpy.libs/libscipy_openblas64_-ab.so",
            "7f01-7f02 r--p 00001000 08:01 1 /venv/numpy.libs/libscipy_openblas64_-ab.so",
            "7f02-7f03 r-xp 00000000 08:01 2 /usr/lib/x86_64-linux-gnu/libc.so.6",
            "7f03-7f04 rw-p 00000000 00:00 0 ",
            "7f04-7f05 r-xp 00000000 08:01 3 /venv/x/_multiarray_umath.cpython-311.so",
            "7ffd-7ffe rw-p 00000000 00:00 0 [stack]",
        ]
    )
    paths = loaded_libraries(maps)
    assert paths == [
        "/venv/numpy.libs/libscipy_openblas64_-ab.so",
        "/usr/lib/x86_64-linux-gnu/libc.so.6",
        "/venv/x/_multiarray_umath.cpython-311.so",
    ]
    assert thread_pool_libraries(paths) == (["/venv/numpy.libs/libscipy_openblas64_-ab.so"], None)
    _, reason = thread_pool_libraries([*paths, "/usr/lib/libgomp.so.1"])
    assert reason is not None and "libgomp.so.1" in reason
    assert thread_pool_libraries(["/opt/intel/libmkl_rt.so.2"])[1] is not None


def test_the_zygote_lends_no_script_a_pool_it_cannot_resize() -> None:
    from snakemake_executor_plugin_dask_slurm.warm.script import why_zygote_cannot

    base = {"PATH": "/bin"}
    request = {"marker": "k", "env": [*base.items(), ("DASK_SLURM_JOB", "k")]}
    assert why_zygote_cannot(request, base, ["/w"], None) is None
    assert why_zygote_cannot(request, base, ["/w"], "libgomp loaded") == "libgomp loaded"


def test_a_warm_script_ends_as_the_interpreter_would() -> None:
    """Its globals cleared in the interpreter's order (one leading underscore first,
    ``__builtins__`` kept), and a stdout whose last flush fails (a full disk) reported as
    "Exception ignored" and made the interpreter's status 120 by the caller."""
    import contextlib
    import io
    import sys

    from snakemake_executor_plugin_dask_slurm.warm.child import flush_std_streams
    from snakemake_executor_plugin_dask_slurm.warm.script_run import clear_globals

    cleared: list[str] = []

    class Watched:
        def __init__(self, name: str) -> None:
            self.name = name

        def __del__(self) -> None:
            cleared.append(self.name)

    namespace = {"c": Watched("c"), "_a": Watched("_a"), "__b__": Watched("__b__")}
    namespace["__builtins__"] = "kept"  # type: ignore[assignment]
    clear_globals(namespace)  # type: ignore[arg-type]
    assert cleared == ["_a", "c", "__b__"]
    assert namespace == {"c": None, "_a": None, "__b__": None, "__builtins__": "kept"}

    full = open("/dev/full", "w")  # noqa: SIM115
    full.write("lost\n")
    said = io.StringIO()
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = full, said
    try:
        ok = flush_std_streams()
    finally:
        sys.stdout, sys.stderr = saved
        with contextlib.suppress(OSError):
            full.close()
    assert not ok
    assert "Exception ignored in" in said.getvalue() and "No space left" in said.getvalue()
    assert "Traceback" not in said.getvalue()  # as the interpreter prints it: no frames
    assert flush_std_streams()  # the test's own streams flush


# -- the warm protocol (worker/warm_protocol.py) ---------------------------------------------


def test_every_operation_has_one_typed_message() -> None:
    from typing import get_args, get_type_hints

    from snakemake_executor_plugin_dask_slurm.worker import warm_protocol as protocol

    kinds = get_args(protocol.Message)
    ops = [get_args(get_type_hints(kind)["op"])[0] for kind in kinds]
    assert sorted(ops) == sorted(protocol.Op) and len(kinds) == len(protocol.Op)
    assert set(get_args(protocol.JobMessage)) <= set(kinds)


def test_a_typed_message_goes_on_the_wire_as_the_json_it_always_was() -> None:
    from snakemake_executor_plugin_dask_slurm.worker.warm_protocol import (
        Inbox,
        Op,
        Run,
        Started,
        encode,
    )

    started = encode(Started(op=Op.STARTED, key="k", pid=7))
    assert started == (34).to_bytes(4, "big") + b'{"op":"started","key":"k","pid":7}'
    run = Run(op=Op.RUN, key="k", argv=["--cores", "1"], env=[("A", "1")], cwd="/w", group=False)
    text = (
        b'{"op":"run","key":"k","argv":["--cores","1"],"env":[["A","1"]],"cwd":"/w","group":false}'
    )
    assert encode(run)[4:] == text
    assert Inbox().feed(encode(run) + started) == [
        {"op": "run", "key": "k", "argv": ["--cores", "1"], "env": [["A", "1"]], "cwd": "/w",
         "group": False},
        {"op": "started", "key": "k", "pid": 7},
    ]  # fmt: skip
