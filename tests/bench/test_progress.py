"""The progress report of `multihop bench`: a bar on a terminal, plain lines elsewhere."""

from __future__ import annotations

import io

from multihop.bench.progress import Progress


def test_plain_lines_when_not_a_terminal() -> None:
    out = io.StringIO()
    p = Progress(out, suites=2)
    p.suite("channels", 2)
    p.step("ump 0 B")
    p.step("ump 64 B")
    p.suite("hops", 1)
    p.step("core 0 -> core 1")
    p.message("a note")
    p.close()
    assert out.getvalue().splitlines() == [
        "[1/2] channels: ump 0 B", "[2/2] channels: ump 64 B", "[1/1] hops: core 0 -> core 1", "a note",
    ]  # fmt: skip


def test_bar_redraws_in_place_and_ends_its_line() -> None:
    out = io.StringIO()
    p = Progress(out, bar=True, suites=2)
    p.suite("window", 4)
    for w in (1, 4, 16, 64):
        p.step(f"window {w}")
    p.message("interrupted")
    text = out.getvalue()
    frames = text.split("\r\x1b[K")[1:]
    assert len(frames) == 4
    assert frames[0].startswith("window  (1/2) [" + "-" * 20 + "]   1/4  window 1")
    assert frames[3].startswith("window  (1/2) [" + "#" * 15 + "-" * 5 + "]   4/4  window 64")
    assert text.endswith("\ninterrupted\n")  # the note is on its own line, not under the bar
    p.close()
    assert out.getvalue() == text  # nothing left open


def test_a_terminal_gets_the_bar_by_default() -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    out = Tty()
    p = Progress(out)
    p.suite("peers", 1)
    p.step("pipe 64 B")
    p.close()
    assert out.getvalue().startswith("\r\x1b[Kpeers [") and out.getvalue().endswith("\n")
