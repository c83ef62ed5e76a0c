"""Background work: results and exceptions reach the UI thread, a destroyed context drops
them, and every pool (the plots' render thread too) is drained at the application's exit."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
import shiboken6
from PySide6.QtCore import QObject, QSize, QThreadPool
from PySide6.QtGui import QImage, QPen, QPolygonF, QTransform
from pytestqt.qtbot import QtBot

from dtgui.ui import workers
from dtgui.ui.workers import (
    Worker,
    create_worker,
    dedicated_pool,
    error_details,
    error_message,
    run_in_thread,
)


class Boom(RuntimeError):
    pass


def test_an_exception_reaches_on_error_as_the_exception_with_its_traceback(qtbot: QtBot) -> None:
    ui_thread = threading.get_ident()
    got: list[tuple[BaseException, int]] = []

    def work() -> None:
        raise Boom("the disk is full\nsecond line")

    run_in_thread(work, lambda _r: None, lambda exc: got.append((exc, threading.get_ident())))
    qtbot.waitUntil(lambda: bool(got), timeout=5000)
    exc, thread = got[0]
    assert isinstance(exc, Boom) and thread == ui_thread
    assert error_message(exc) == "the disk is full"
    details = error_details(exc)
    assert "Traceback" in details and "in work" in details and "Boom: the disk is full" in details
    assert error_message(KeyError()) == "KeyError"  # an exception without a message


def test_results_and_progress_reach_the_ui_thread_and_a_destroyed_context_drops_them(
        qtbot: QtBot) -> None:
    seen: list[object] = []

    def work(w: Worker[int]) -> int:
        w.report("half")
        return 42

    create_worker(work, on_done=seen.append, on_progress=seen.append)
    qtbot.waitUntil(lambda: 42 in seen, timeout=5000)
    assert seen == ["half", 42]

    context = QObject()
    release = threading.Event()
    dropped: list[object] = []
    delivered: list[object] = []

    def slow(_w: workers.Worker[str]) -> str:
        release.wait(5)
        return "late"

    create_worker(slow, on_done=delivered.append, on_dropped=dropped.append, context=context)
    context.deleteLater()
    qtbot.waitUntil(lambda: not shiboken6.isValid(context), timeout=5000)
    release.set()
    qtbot.waitUntil(lambda: dropped == ["late"], timeout=5000)
    qtbot.wait(50)
    assert delivered == []


def test_shutdown_drains_every_pool_and_asks_running_work_to_stop(qtbot: QtBot) -> None:
    """Running work is asked to stop and waited for; what a dedicated pool still has queued is
    dropped, what the global pool has queued still runs (a settings file written at exit)."""
    pool = dedicated_pool("test-render")
    assert dedicated_pool("test-render") is pool and pool.maxThreadCount() == 1
    started = {"global": threading.Event(), "render": threading.Event()}
    stopped: list[str] = []
    ran: list[str] = []

    def until_cancelled(name: str) -> Callable[[workers.Worker[None]], None]:
        def work(worker: workers.Worker[None]) -> None:
            started[name].set()
            worker.cancelled.wait(10)
            stopped.append(name)
        return work

    create_worker(until_cancelled("global"))
    create_worker(until_cancelled("render"), pool=pool)
    assert started["global"].wait(5) and started["render"].wait(5)
    create_worker(lambda _w: ran.append("image"), pool=pool)  # queued behind the render
    create_worker(lambda _w: ran.append("settings"))
    assert workers.shutdown(5000)
    assert sorted(stopped) == ["global", "render"]
    assert ran == ["settings"]
    assert QThreadPool.globalInstance().activeThreadCount() == 0
    assert pool.activeThreadCount() == 0


def test_the_plots_render_thread_is_the_one_thread_render_pool_and_a_failed_render_is_retried(
        qtbot: QtBot, monkeypatch: pytest.MonkeyPatch) -> None:
    import numpy as np
    import pyqtgraph as pg

    from dtgui.ui.plots import envelope_layer
    from dtgui.ui.plots.envelope_layer import RENDER_POOL, EnvelopeLayer

    threads: list[int] = []
    failures = [Boom("the first image fails")]
    render = envelope_layer.render_lines

    def recording(lines: list[tuple[QPolygonF, QPen, bool]], transform: QTransform, size: QSize,
                  ratio: float) -> QImage:
        threads.append(threading.get_ident())
        if failures:
            raise failures.pop()
        return render(lines, transform, size, ratio)

    monkeypatch.setattr(envelope_layer, "render_lines", recording)
    widget = pg.PlotWidget()
    qtbot.addWidget(widget)
    keys = range(128)
    curves: dict[object, pg.PlotDataItem] = {k: pg.PlotDataItem(pen=pg.mkPen("b")) for k in keys}
    layer = EnvelopeLayer(curves)
    widget.addItem(layer)
    bx = np.arange(200, dtype=float)
    for k in keys:
        layer.set_series(k, bx, bx * 0 + k + 1.0, bx * 0 + k)
    layer.commit()
    widget.resize(600, 400)
    widget.show()
    qtbot.waitExposed(widget)
    assert layer.threaded
    qtbot.waitUntil(lambda: len(threads) >= 1, timeout=10_000)
    layer.update()  # the next paint asks again after the failure
    qtbot.waitUntil(lambda: layer.image is not None, timeout=10_000)
    image = layer.image
    assert image is not None and (layer.drawn or image.generation == layer.generation)
    pool_thread: list[int] = []
    create_worker(lambda _w: pool_thread.append(threading.get_ident()),
                  pool=dedicated_pool(RENDER_POOL))
    qtbot.waitUntil(lambda: bool(pool_thread), timeout=5000)
    assert set(threads) == {pool_thread[0]} != {threading.get_ident()}
    assert workers.shutdown(5000) and dedicated_pool(RENDER_POOL).activeThreadCount() == 0


def test_work_that_ends_after_its_application_was_torn_down_is_dropped_quietly(
        qtbot: QtBot, capfd: pytest.CaptureFixture[str]) -> None:
    """PySide deletes every QObject, the relay too, with its application (a script's end, one
    test's application after another's): work still running then is dropped where it ran
    (its result released by on_dropped), nothing is raised on the pool thread, and the next
    work is delivered through a new relay."""
    release = threading.Event()
    dropped: list[tuple[object, int]] = []
    delivered: list[object] = []

    def slow(_w: workers.Worker[str]) -> str:
        release.wait(5)
        return "late"

    create_worker(slow, on_done=delivered.append,
                  on_dropped=lambda r: dropped.append((r, threading.get_ident())))
    old = workers._relay
    assert old is not None
    shiboken6.delete(old)  # as the application's teardown does
    release.set()
    qtbot.waitUntil(lambda: bool(dropped), timeout=5000)
    assert dropped[0][0] == "late" and dropped[0][1] != threading.get_ident()
    qtbot.wait(50)
    assert delivered == []
    seen: list[object] = []
    run_in_thread(lambda: 7, seen.append)
    qtbot.waitUntil(lambda: seen == [7], timeout=5000)
    assert workers._relay is not old and shiboken6.isValid(workers._relay)
    assert "Signal source has been deleted" not in capfd.readouterr().err


def test_a_script_that_ends_with_work_running_drains_it_quietly(tmp_path: Path) -> None:
    """A script that ends without shutdown() while work runs: PySide's teardown at the
    interpreter's exit deletes the relay; the exit first waits for the work (it ends whole),
    and nothing is raised on the pool thread."""
    ended = tmp_path / "ended"
    script = tmp_path / "ends.py"
    script.write_text(
        "import pathlib, time\n"
        "from PySide6.QtWidgets import QApplication\n"
        "app = QApplication([])\n"
        "from dtgui.ui.workers import create_worker\n"
        "def work(worker):\n"
        "    time.sleep(0.5)\n"
        f"    pathlib.Path({str(ended)!r}).write_text('whole')\n"
        "create_worker(work, on_done=print)\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
    assert done.returncode == 0, done.stderr
    assert ended.read_text() == "whole"
    assert "Signal source has been deleted" not in done.stderr, done.stderr
    assert "Error calling Python override" not in done.stderr, done.stderr
