"""Output is captured at the Python and the fd level, belongs to its own script, and is bounded."""

from __future__ import annotations

import threading
import time

import psutil
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from tests.conftest import MakeRuntime, wait_for_file
from toolscript import Runtime
from toolscript.host.output import StreamCapture
from toolscript.results import render_output

from .conftest import wait_for_file_holding_the_loop


@pytest.mark.timeout(20)
async def test_print_and_writes_to_fd_one_and_two_are_captured(runtime: Runtime) -> None:
    result = await runtime.run(
        "import os, sys\n"
        "print('from print')\n"
        "os.write(1, b'from fd 1\\n')\n"
        "print('to stderr', file=sys.stderr)\n"
        "os.write(2, b'from fd 2\\n')\n"
    )
    assert result.status == "ok", result.text
    assert "from print\n" in result.stdout and "from fd 1\n" in result.stdout
    assert "to stderr\n" in result.stderr and "from fd 2\n" in result.stderr
    assert "to stderr" not in result.stdout and "from print" not in result.stderr


@pytest.mark.timeout(20)
async def test_output_of_a_subprocess_is_the_scripts_output(runtime: Runtime) -> None:
    result = await runtime.run(
        "import subprocess\n"
        "subprocess.run(['echo', 'x from echo'], check=True)\n"
        "subprocess.run(['sh', '-c', 'echo y from sh >&2'], check=True)\n"
    )
    assert result.status == "ok", result.text
    assert result.stdout == "x from echo\n"
    assert result.stderr == "y from sh\n"


@pytest.mark.timeout(20)
async def test_python_level_output_without_a_newline_is_flushed_into_its_own_run(
    runtime: Runtime,
) -> None:
    first = await runtime.run("import sys\nsys.stdout.write('no newline')\nprint('e', end='')")
    second = await runtime.run("print('next')")
    assert first.stdout == "no newlinee"
    assert second.stdout == "next\n"


@pytest.mark.timeout(20)
async def test_output_of_a_failing_or_stopped_script_is_kept(runtime: Runtime) -> None:
    failed = await runtime.run("print('before the error')\nraise RuntimeError('boom')")
    assert failed.stdout == "before the error\n"
    stopped = await runtime.run(
        "import time\nprint('before the stop')\ntime.sleep(30)", time_limit=1
    )
    assert stopped.status == "time_limit"
    assert stopped.stdout == "before the stop\n"


@pytest.mark.timeout(30)
async def test_output_written_between_scripts_belongs_to_neither(
    runtime: Runtime, tmp_path
) -> None:
    # A thread and a subprocess left running by the first script write only after it ended
    # (they wait for the "go" file the test makes after the first result came back).
    go, written = tmp_path / "go", tmp_path / "written"
    shell = runtime.shell()
    first = await shell.run(
        "import os, subprocess, threading, time, pathlib\n"
        f"go, written = pathlib.Path({str(go)!r}), pathlib.Path({str(written)!r})\n"
        "def later():\n"
        "    deadline = time.monotonic() + 10\n"
        "    while not go.exists() and time.monotonic() < deadline:\n"
        "        time.sleep(0.005)\n"
        "    print('LATE from print', flush=True)\n"
        "    os.write(1, b'LATE from fd 1\\n')\n"
        "    os.write(2, b'LATE from fd 2\\n')\n"
        "    subprocess.run(['echo', 'LATE from echo'])\n"
        "    written.touch()\n"
        "threading.Thread(target=later).start()\n"
        "print('first')\n"
    )
    assert first.status == "ok" and first.stdout == "first\n"
    go.touch()
    await wait_for_file(written)
    second = await shell.run("print('second')")
    assert second.stdout == "second\n"
    assert "LATE" not in second.stderr


@pytest.mark.timeout(30)
async def test_output_written_between_scripts_stays_out_even_if_the_host_has_not_read_it(
    runtime: Runtime, tmp_path
) -> None:
    # The host's loop is held while the late output is written, so those bytes are still
    # in the pipe when the next script starts; they must not be taken as its output.
    go, written = tmp_path / "go", tmp_path / "written"
    shell = runtime.shell()
    first = await shell.run(
        "import os, threading, time, pathlib\n"
        f"go, written = pathlib.Path({str(go)!r}), pathlib.Path({str(written)!r})\n"
        "def later():\n"
        "    deadline = time.monotonic() + 10\n"
        "    while not go.exists() and time.monotonic() < deadline:\n"
        "        time.sleep(0.005)\n"
        "    os.write(1, b'LATE from fd 1\\n')\n"
        "    os.write(2, b'LATE from fd 2\\n')\n"
        "    written.touch()\n"
        "threading.Thread(target=later).start()\n"
    )
    assert first.status == "ok"
    go.touch()
    wait_for_file_holding_the_loop(written)
    second = await shell.run("print('second')")
    assert second.stdout == "second\n"
    assert "LATE" not in second.stderr


@pytest.mark.timeout(20)
async def test_lone_surrogates_and_invalid_utf8_in_output_are_reported_not_fatal(
    runtime: Runtime,
) -> None:
    result = await runtime.run(
        "import os, sys\n"
        "print('lone \\ud800 surrogate')\n"
        "print('err \\udfff', file=sys.stderr)\n"
        "os.write(1, b'bad \\xff\\xfe\\xc3 bytes\\n')\n"
        "os.write(1, bytes(range(256)))\n"
        "'value \\ud800'"
    )
    assert result.status == "ok", result.text
    assert "lone" in result.stdout and "surrogate" in result.stdout
    assert "bad" in result.stdout and "bytes" in result.stdout
    assert "err" in result.stderr
    assert result.value is not None and "value" in result.value
    for text in (result.stdout, result.stderr, result.value, result.text):
        text.encode("utf-8")  # no lone surrogate survives into what the host hands on
    import json

    json.dumps(result.to_dict(), ensure_ascii=False).encode("utf-8")
    assert (await runtime.run("'still fine'")).value == "'still fine'"


@pytest.mark.timeout(20)
async def test_output_over_the_cap_keeps_head_and_tail_and_states_the_cut(
    make_runtime: MakeRuntime,
) -> None:
    runtime = await make_runtime(output_limit=10_000)
    result = await runtime.run(
        "import os\nos.write(1, b'HEAD' + b'a' * 100_000)\nprint('b' * 100_000 + 'TAIL')\n"
    )
    assert result.status == "ok"
    assert result.stdout.startswith("HEAD")
    assert result.stdout.rstrip("\n").endswith("TAIL")
    assert len(result.stdout) < 12_000
    assert "bytes of output cut" in result.stdout
    assert "190,009 bytes of output cut" in result.stdout


@pytest.mark.timeout(60)
async def test_a_hundred_megabytes_printed_cost_the_host_under_about_twice_the_cap(
    runtime: Runtime,
) -> None:
    # Measured: the host process's resident memory, sampled every few milliseconds by a
    # thread while the script runs, minus the value just before. The cap is the default
    # output_limit (1 MB per stream). Bound: twice the cap, plus 8 MB for allocator noise
    # (the result's own text, read buffers); holding the output would cost over 100 MB.
    cap = runtime.output_limit
    await runtime.run("import os\nfor _ in range(8):\n    os.write(1, b'w' * (1 << 20))")
    host = psutil.Process()
    before = host.memory_info().rss
    peak = before
    sampling = True

    def sample() -> None:
        nonlocal peak
        while sampling:
            peak = max(peak, host.memory_info().rss)
            time.sleep(0.002)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        result = await runtime.run(
            "import os, sys\n"
            "chunk = b'z' * (1 << 20)\n"
            "for _ in range(50):\n"
            "    os.write(1, chunk)\n"
            "line = 'p' * 1023 + '\\n'\n"
            "for _ in range(50 * 1024):\n"
            "    sys.stdout.write(line)\n"
            "print('THE END')\n",
            time_limit=40,
        )
    finally:
        sampling = False
        sampler.join()
    assert result.status == "ok", result.note
    growth = peak - before
    assert growth < 2 * cap + 8 * 1024 * 1024, f"the host grew by {growth:,} bytes"
    assert result.stdout.rstrip("\n").endswith("THE END")
    assert "bytes of output cut" in result.stdout
    assert len(result.stdout) < 1.1 * cap


@given(
    before=st.binary(max_size=200),
    body=st.binary(max_size=2000),
    after=st.binary(max_size=200),
    cuts=st.lists(st.integers(min_value=0, max_value=2500), max_size=8),
)
def test_only_the_bytes_between_the_markers_are_the_scripts_however_they_are_split(
    before: bytes, body: bytes, after: bytes, cuts: list[int]
) -> None:
    nonce = "0123456789abcdef"
    marker = nonce.encode()
    assume(marker not in before + body + after)
    stream = before + b"\x00>" + marker + b"\x00" + body + b"\x00" + marker + b"\x00" + after
    capture = StreamCapture(10_000)
    capture.begin(nonce)
    start = 0
    for cut in [*sorted({min(cut, len(stream)) for cut in cuts}), len(stream)]:
        capture.feed(stream[start:cut])
        start = cut
    captured = capture.take()
    assert captured.total_bytes == len(body) and captured.cut_bytes == 0
    assert captured.text == body.decode("utf-8", "backslashreplace")
    assert capture.unattributed_bytes == len(before) + len(after)


@pytest.mark.timeout(30)
async def test_the_text_states_all_that_was_cut_when_the_capture_cut_too(
    make_runtime: MakeRuntime,
) -> None:
    # The capture keeps 10,000 bytes of 300,009 and the text a few thousand characters of
    # those: the model must read that 300,000-odd were cut, not a few thousand.
    runtime = await make_runtime(output_limit=10_000, text_limit=1_000)
    result = await runtime.run("print('HEAD' + 'a' * 300_000 + 'TAIL')\n")
    assert result.status == "ok", result.text
    assert "290,009 bytes of output cut" in result.stdout
    [mark] = [line for line in result.text.splitlines() if " cut …" in line]
    assert mark.startswith("… 290,009 bytes of output and "), mark
    more = int(mark.split(" and ")[1].split()[0].replace(",", ""))
    shown = result.text.split("stdout:\n", 1)[1].replace(mark, "").replace("\n", "")
    assert len(shown) + 290_009 + more == 300_008
    assert shown.startswith("HEAD") and shown.endswith("TAIL")


def test_the_output_so_far_states_the_captures_cut_too() -> None:
    # What `script_status` shows of a running script: its last lines; when the capture has
    # cut the stream's middle already, the mark says so, not only the characters cut here.
    head, tail = "HEAD" + "a" * 5_000, "line\n" * 1_000 + "TAIL"
    shown = render_output(head + "\n… 290,009 bytes of output cut …\n" + tail, "", 1_000)
    first = shown.splitlines()[1]
    assert first.startswith("… 290,009 bytes of output and "), shown[:200]
    more = int(first.split(" and ")[1].split()[0].replace(",", ""))
    kept = shown.split("\n", 2)[2]
    assert tail.endswith(kept) and len(head) + len(tail) == more + len(kept)


@pytest.mark.timeout(60)
async def test_a_huge_value_is_cut_and_said_so_and_the_interpreter_stays(runtime: Runtime) -> None:
    # Whole, an 80 MB repr made a frame over the channel's bound: the interpreter was killed
    # as if the script had broken the protocol, and its state was lost.
    result = await runtime.run("x = 1\n'q' * 80_000_000", time_limit=30)
    assert result.status == "ok", result.text
    value = result.value or ""
    assert len(value) < 1_100_000 and "characters: " in value and "are cut here" in value
    assert value.startswith("'qqq") and value.endswith("qqq'")
    after = await runtime.run("x")
    assert (after.value, after.generation) == ("1", result.generation), after.text


@pytest.mark.timeout(30)
async def test_a_time_limit_that_comes_while_the_value_is_written_is_a_time_limit(
    runtime: Runtime,
) -> None:
    code = (
        "class Slow:\n"
        "    def __repr__(self):\n"
        "        import time\n"
        "        time.sleep(100)\n"
        "        return 'never'\n"
        "Slow()\n"
    )
    result = await runtime.run(code, time_limit=1)
    assert result.status == "time_limit", result.text


@pytest.mark.timeout(20)
async def test_what_a_script_printed_to_a_closed_stdout_is_its_own_not_the_next_ones(
    make_runtime: MakeRuntime,
) -> None:
    runtime = await make_runtime()
    first = await runtime.run("import os\nos.close(1)\nprint('from script 1')")
    second = await runtime.run("print('from script 2')")
    assert "from script 1" not in second.stdout, second.stdout
    assert second.stdout == "from script 2\n"
    assert first.stdout in ("", "from script 1\n")


@pytest.mark.timeout(20)
async def test_a_sigint_the_script_sends_itself_is_its_own_error_not_a_cancel(
    runtime: Runtime,
) -> None:
    result = await runtime.run(
        "import os, signal, time\nos.kill(os.getpid(), signal.SIGINT)\ntime.sleep(1)\n"
    )
    assert result.status == "error", result.text
    assert "Cancelled by the caller" not in result.text
    assert "SIGINT" in (result.error or ""), result.text


@pytest.mark.timeout(60)
async def test_a_huge_value_is_said_cut_by_all_that_was_cut_in_the_text(runtime: Runtime) -> None:
    # The kernel keeps a million characters of a 5,000,002-character repr; the text keeps
    # far fewer. Its one mark says how much of the whole is not shown.
    result = await runtime.run("'x' * 5_000_000")
    shown = result.text.split("value:\n", 1)[1].count("x")
    assert "[the value's repr was 5,000,002 characters: " in result.text, result.text[-500:]
    said = result.text.split("characters: ")[1].split(" are cut here")[0]
    assert int(said.replace(",", "")) == 5_000_002 - shown - 2  # the quotes are shown too
    assert " characters cut …" not in result.text
