"""Where library output goes (orchestrator/run/console.py `quiet_libraries`): a real Ray worker's print lands in the
log file, not on our console, and neither holds ANSI colour codes when they are files or pipes."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    import ray
    from orchestrator.run import ray_env
    from orchestrator.run.console import quiet_libraries

    log = Path(sys.argv[1])
    with quiet_libraries(log) as console:
        ray_env.start_ray(None, 1, dashboard=False)

        @ray.remote
        def hello():
            print("hello from a ray worker", flush=True)

        ray.get(hello.remote())
        deadline = time.time() + 60   # Ray's driver forwards worker output a moment later
        while "hello from a ray worker" not in log.read_text() and time.time() < deadline:
            time.sleep(0.2)
        ray_env.stop_ray()
        console.print("[bold]our own line[/]")
""")


def test_a_ray_workers_output_goes_to_the_log_without_colour_codes(tmp_path):
    log = tmp_path / "logs" / "submit.log"
    env = {k: v for k, v in os.environ.items() if k != "RAY_COLOR_PREFIX"}   # Ray's default: colour codes
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(log)], capture_output=True, text=True, cwd=ROOT,
                         env=env, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    text = log.read_text()
    assert "hello from a ray worker" in text            # the worker's print reached the log, with Ray's prefix
    assert "pid=" in text.split("hello from a ray worker")[0].splitlines()[-1]
    assert "\x1b[" not in text                          # no colour codes in a file
    assert out.stdout.strip() == "our own line"         # our console: our line only, and no codes in a pipe
    assert "hello from a ray worker" not in out.stdout + out.stderr
