# What a script sees of its interpreter: the same as `python FILE` started by Snakemake's
# shell, warm or not. proof/ (not compared) says whose child it was and its environment.
import json
import os
import signal
import sys
import threading

real = __real_file__  # noqa: F821 (the preamble's: the generated file, before __file__)
facts = [
    f"argv {len(sys.argv)} {sys.argv[0] == real} {os.path.basename(real).split('.', 1)[1]}",
    f"orig_argv {sys.orig_argv == [sys.executable, real]}",
    f"name {__name__} file {os.path.relpath(__file__)} cached {__cached__}",
    f"path0 {sys.path[0] == os.path.dirname(os.path.realpath(real))}",
    f"main {sys.modules['__main__'].__dict__ is globals()} {type(__loader__).__name__}",
    f"pwd {os.environ['PWD'] == os.getcwd()} _ {os.environ.get('_') == sys.executable}",
    f"threads {os.environ['OMP_NUM_THREADS']} {snakemake.threads}",  # noqa: F821
    f"stdio {sys.stdout.line_buffering} {sys.stderr.line_buffering} {sys.stderr.errors}",
    f"stdio {type(sys.stdout.buffer).__name__} {sys.stdout.write_through} {sys.stdin.mode}",
    f"stdio names {getattr(sys.stdout.buffer, 'raw', sys.stdout.buffer).name}",
    f"stdio same {sys.stdout is sys.__stdout__} {sys.stdin.buffer.raw.name}",
    f"sigint {signal.getsignal(signal.SIGINT) is signal.default_int_handler}",
    f"sigpipe {signal.getsignal(signal.SIGPIPE) == signal.SIG_IGN}",
    f"sigterm {signal.getsignal(signal.SIGTERM) == signal.SIG_DFL}",
    f"blocked {sorted(signal.pthread_sigmask(signal.SIG_BLOCK, []))}",
    f"threads {threading.active_count()} {threading.current_thread() is threading.main_thread()}",
    f"fds {sorted(int(fd) for fd in os.listdir('/proc/self/fd'))}",
]
with open(snakemake.output[0], "w") as f:  # noqa: F821
    f.write("\n".join(facts) + "\n")
os.makedirs("proof", exist_ok=True)
with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
    parent = f.read().replace(b"\0", b" ").decode()
with open("proof/inspect.json", "w") as f:
    json.dump({"parent": parent, "env": dict(os.environ)}, f)
print("inspect says hello on stdout")
