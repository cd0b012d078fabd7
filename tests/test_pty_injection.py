"""Terminal escape sequences from user strings, seen by a real pseudo-terminal (issue 37, class 2).

tests/test_terminal_injection.py checks every input with typer's runner, which captures the output as a
string; here ``nqf`` runs in a child process whose stdout and stderr are a pseudo-terminal (``pty``), so
anything that behaves differently on a terminal (rich's styling, progress bars, ``isatty`` branches) is
seen too.  The terminal is put in raw mode, so the bytes read are the bytes nqf wrote (no ``\\n`` →
``\\r\\n``), and they must hold no C0 control character but the newline, no DEL and no C1 control.
"""

import os
import pty
import select
import subprocess
import sys
import tty

import pytest

# every payload of tests/test_terminal_injection.py in one string: OSC title, CSI 2J, OSC 8 link, bell + CR, C1
PAYLOAD = "\x1b]0;pwned\x07" + "\x1b[2J" + "\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\" + "a\rb\x07" + "\x9b31m"


def _run_in_pty(args, cwd, timeout=120) -> str:
    """Run ``python -m nqf ARGS`` with stdout and stderr on a raw pseudo-terminal; return what it wrote."""
    master, slave = pty.openpty()
    tty.setraw(slave)
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "NQF_TRACEBACK")}
    env.update(TERM="xterm-256color", COLUMNS="120", OMP_NUM_THREADS="1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "nqf", *args], stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, cwd=cwd, env=env
    )
    os.close(slave)
    chunks = []
    try:
        while True:
            ready, _, _ = select.select([master], [], [], timeout)
            if not ready:
                proc.kill()
                raise AssertionError(f"nqf {args[0]} wrote nothing for {timeout} s")
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(master)
        proc.wait(timeout=timeout)
    return b"".join(chunks).decode("utf-8", errors="replace")


def _controls(text: str) -> list[str]:
    return sorted({repr(c) for c in text if (ord(c) < 32 and c != "\n") or 0x7F <= ord(c) <= 0x9F})


def _model_file(tmp_path) -> str:
    p = tmp_path / "m.py"
    p.write_text(f"def make(*args, **kwargs):\n    raise ValueError({PAYLOAD!r})\n")
    return str(p)


def _config(tmp_path) -> str:
    p = tmp_path / "c.toml"
    key = PAYLOAD.encode("unicode_escape").decode().replace("\\x", "\\u00")
    p.write_text(f'experiment = "demo"\n[params]\n"k{key}" = 1\n')
    return str(p)


def _class_csv(tmp_path) -> str:
    """A CSV whose class names carry the payload (a whole analysis prints them in its tables)."""
    x = [((i * 37) % 11 - 5) / 5 for i in range(60)]
    rows = [f'{a},{(a * 7) % 1 - 0.5},"{"a" + PAYLOAD if a > 0 else "b"}"' for a in x]  # quoted: it holds a CR
    p = tmp_path / "classes.csv"
    p.write_text("x0,x1,label\n" + "\n".join(rows) + "\n")
    return str(p)


CASES = {
    "missing data file": lambda t: ["analyze", "--data", f"d{PAYLOAD}.csv"],
    "missing model file": lambda t: ["analyze", "--data", "iris", "--model", f"m{PAYLOAD}.py:make"],
    "factory message and name": lambda t: ["analyze", "--data", "iris", "--model", f"{_model_file(t)}:mk{PAYLOAD}"],
    "factory exception": lambda t: ["analyze", "--data", "iris", "--model", f"{_model_file(t)}:make"],
    "config key": lambda t: ["run", _config(t), "--out", str(t / "r")],
    "sweep grid key": lambda t: ["sweep", _config(t), "--grid", f"w{PAYLOAD}=1,2", "--dry-run"],
    "class names, whole analysis": lambda t: ["analyze", "--data", _class_csv(t), "--target", "label", "--model",
                                              "mlp:width=8", "--eps", "1e-3", "--out", str(t / "run")],
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(CASES))
def test_no_control_character_reaches_a_real_terminal(case, tmp_path):
    out = _run_in_pty(CASES[case](tmp_path), tmp_path)
    if case.startswith("class names"):  # a finished analysis, the payload printed as text
        assert "run directory:" in out and "\\x1b]0;pwned" in out, out
    else:
        assert "error" in out, out
    assert _controls(out) == [], out


def test_the_check_sees_a_control_character(tmp_path):
    """The check can fail: a child that prints the payload raw is caught."""
    master, slave = pty.openpty()
    tty.setraw(slave)
    subprocess.run([sys.executable, "-c", f"print({PAYLOAD!r})"], stdout=slave, check=True)
    os.close(slave)
    data = os.read(master, 65536).decode("utf-8", errors="replace")
    os.close(master)
    assert "'\\x1b'" in _controls(data) and "'\\r'" in _controls(data)
