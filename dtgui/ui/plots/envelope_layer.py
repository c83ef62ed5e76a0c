"""One graphics item that draws the envelopes of many series, painted off the UI thread when
they are many.

Each series is one polyline (its vertices copied straight into a QPolygonF: a QPainterPath
would cost 5x more to build, for every series every frame), drawn in its curve's pen while
its curve is visible: its envelope's `zigzag`, or with many series, whose blocks are a few
pixels apart, its filled `band`. Stroking costs by the pixel: 128 series of 200 blocks take
15-50 ms to paint on a busy 2-core machine, too long for the UI thread to stay responsive. So past RENDER_THREAD_MIN_VERTICES the polylines are drawn into a QImage
by a background thread (QPainter on a QImage is safe off the UI thread, and PySide6 lets the
UI thread run meanwhile), and paint() only draws the latest image, mapped to the current view
(a range change shows the previous image stretched for the 20-50 ms a new one takes). The
render thread is the one-thread pool `dtgui.ui.workers.dedicated_pool(RENDER_POOL)`, shared
by every plot, each layer with at most one image in flight: when it comes, the layer asks
for the next one if the data or the view moved on meanwhile (the latest wins). Fewer
vertices are painted directly, into a cached pixmap.
"""

from __future__ import annotations

import logging
from typing import Generic, NamedTuple, TypeVar

import numpy as np
import pyqtgraph as pg
from pyqtgraph import functions as fn
from PySide6.QtCore import QPointF, QRectF, QSize, Qt
from PySide6.QtGui import QBrush, QImage, QPainter, QPen, QPolygonF, QTransform
from PySide6.QtWidgets import QGraphicsItem, QStyleOptionGraphicsItem, QWidget

from dtgui.ui.workers import Worker, create_worker, dedicated_pool

K = TypeVar("K")  # what names a plot's series (a replica id, a task, a device label)

RENDER_THREAD_MIN_VERTICES = 20_000  # ~10 ms of stroking on this machine's slowest
MAX_IMAGE_SIDE = 8192
# One thread for every plot: renders are short and each layer has at most one in flight.
RENDER_POOL = "dtgui-plot-render"

log = logging.getLogger(__name__)


def zigzag(bx: np.ndarray, top: np.ndarray, bottom: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Envelope blocks as the line "peak" downsampling draws: (x0, max0), (x0, min0), (x1, max1),
    ... a vertical min..max stroke per block, and the diagonal to the next block fills the pixel
    columns between two blocks (when they are at most ~2 px apart)."""
    vx = np.repeat(bx, 2)
    vy = np.empty(len(vx))
    vy[0::2] = top
    vy[1::2] = bottom
    return vx, vy


def band(bx: np.ndarray, top: np.ndarray, bottom: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Envelope blocks as the outline of the band between their maxima and minima (along the
    top, back along the bottom): filled, it shows blocks several pixels apart as a band, where
    the zigzag's diagonals would draw a sawtooth."""
    return np.concatenate([bx, bx[::-1]]), np.concatenate([top, bottom[::-1]])


class LayerImage(NamedTuple):
    image: QImage
    transform: QTransform  # item (data) coordinates -> the image's logical pixels
    generation: int  # the layer's data when it was drawn


def draw_lines(painter: QPainter, lines: list[tuple[QPolygonF, QPen, bool]]) -> None:
    """Each polyline in its pen; a band filled in its pen's colour too (its outline keeps a
    flat stretch, a band of no height, visible)."""
    for line, pen, filled in lines:
        painter.setPen(pen)
        if filled:
            painter.setBrush(QBrush(pen.color()))
            painter.drawPolygon(line)
        else:
            painter.drawPolyline(line)


def render_lines(lines: list[tuple[QPolygonF, QPen, bool]], transform: QTransform, size: QSize,
                 ratio: float) -> QImage:
    """The polylines, in data coordinates, drawn into a transparent image (in a worker
    thread: no widget is touched)."""
    image = QImage(max(1, round(size.width() * ratio)), max(1, round(size.height() * ratio)),
                   QImage.Format.Format_ARGB32_Premultiplied)
    image.setDevicePixelRatio(ratio)
    image.fill(Qt.GlobalColor.transparent)
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing, False)
    painter.setTransform(transform)
    draw_lines(painter, lines)
    painter.end()
    return image


class EnvelopeLayer(pg.GraphicsObject, Generic[K]):
    """Draws the envelopes of several series (each in its curve's pen, only while its curve is
    visible) as one graphics item."""

    def __init__(self, curves: dict[K, pg.PlotDataItem]) -> None:
        super().__init__()
        self._curves = curves
        # each series' lines (several where it has gaps: NaN points), [x0 x1 y0 y1]
        self.paths: dict[K, tuple[list[QPolygonF], np.ndarray]] = {}
        self.filled: set[K] = set()  # drawn as a filled band
        self._rect = QRectF()
        self.vertices = 0
        self.generation = 0  # counts the changes of what is drawn
        self.image: LayerImage | None = None
        self._in_flight = False
        # Direct painting goes into a cached pixmap, painted again only when the series or
        # the view's range change (not when the rest of the plot repaints).
        self.setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)

    @property
    def threaded(self) -> bool:
        return self.vertices >= RENDER_THREAD_MIN_VERTICES

    @property
    def drawn(self) -> bool:
        """What is shown is the current data in the current view (painted directly, or its
        image has come and was drawn for the view as it is)."""
        if not self.threaded:
            return True
        image, wanted = self.image, self._target()
        return image is not None and image.generation == self.generation and (
            wanted is None or (image.transform == wanted[0]
                               and image.image.deviceIndependentSize().toSize() == wanted[1]))

    def set_series(self, key: K, bx: np.ndarray, top: np.ndarray, bottom: np.ndarray,
                   y_range: tuple[float, float] | None = None, filled: bool = False) -> None:
        """A series' envelope blocks, drawn as their `zigzag`, or `filled` as their `band`;
        y_range: their min and max, when known."""
        finite = np.isfinite(top) & np.isfinite(bottom)
        if not finite.any():
            self.remove(key)
            return
        lo, hi = y_range if y_range is not None else (float(bottom[finite].min()),
                                                      float(top[finite].max()))
        lines = []
        # a gap (a NaN block: nothing was measured then) ends a line; the next one starts after
        breaks = np.flatnonzero(~finite)
        for start, stop in zip(np.r_[0, breaks + 1], np.r_[breaks, len(bx)], strict=True):
            if stop <= start:
                continue
            vx, vy = (band if filled else zigzag)(bx[start:stop], top[start:stop],
                                                  bottom[start:stop])
            line = fn.create_qpolygonf(len(vx))
            points = fn.ndarray_from_qpolygonf(line)
            points[:, 0] = vx
            points[:, 1] = vy
            lines.append(line)
        self.paths[key] = (lines, np.array([bx[0], bx[-1], lo, hi]))
        if filled:
            self.filled.add(key)
        else:
            self.filled.discard(key)

    def remove(self, key: K) -> None:
        self.paths.pop(key, None)
        self.filled.discard(key)

    def commit(self) -> None:
        """After set_series/remove (or a curve shown or hidden): new bounds, repaint."""
        self.prepareGeometryChange()
        if self.paths:
            b = np.array([v[1] for v in self.paths.values()])
            x0, x1, y0, y1 = b[:, 0].min(), b[:, 1].max(), b[:, 2].min(), b[:, 3].max()
            self._rect = QRectF(x0, y0, x1 - x0, y1 - y0)
        else:
            self._rect = QRectF()
        self.vertices = sum(line.size() for lines, _b in self.paths.values() for line in lines)
        self.generation += 1
        threaded = self.threaded
        mode = QGraphicsItem.CacheMode.NoCache if threaded else \
            QGraphicsItem.CacheMode.DeviceCoordinateCache
        if self.cacheMode() != mode:
            self.setCacheMode(mode)
        if not threaded:
            self.image = None
        self.update()

    def boundingRect(self) -> QRectF:
        # one device pixel of margin for the pen (in data units: the view's pixel size)
        px, py = self.pixelVectors()
        mx = px.length() if px is not None else 0.0
        my = py.length() if py is not None else 0.0
        return self._rect.adjusted(-mx, -my, mx, my)

    def dataBounds(self, ax: int, frac: float = 1.0,
                   orthoRange: tuple[float, float] | None = None
                   ) -> tuple[float, float] | tuple[None, None]:
        if not self.paths:
            return None, None
        r = self._rect
        return (r.left(), r.right()) if ax == 0 else (r.top(), r.bottom())

    def _visible_lines(self) -> list[tuple[QPolygonF, QPen, bool]]:
        lines = []
        for key, (parts, _bounds) in self.paths.items():
            curve = self._curves.get(key)
            if curve is not None and curve.isVisible():
                pen = QPen(curve.opts["pen"])
                lines += [(line, pen, key in self.filled) for line in parts]
        return lines

    def paint(self, p: QPainter, option: QStyleOptionGraphicsItem,
              widget: QWidget | None = None) -> None:
        if not self.threaded:
            p.setRenderHint(QPainter.RenderHint.Antialiasing, False)
            draw_lines(p, self._visible_lines())
            return
        wanted = self._target()
        image = self.image
        if image is not None:
            # image pixels -> data -> the device: exactly the image when the view is as it
            # was drawn for, stretched to the new range until the next one comes
            inverse, invertible = image.transform.inverted()
            if invertible:
                p.save()
                p.setWorldTransform(inverse * p.worldTransform())
                p.drawImage(QPointF(0, 0), image.image)
                p.restore()
        if wanted is not None and (image is None or image.generation != self.generation
                                   or image.transform != wanted[0]
                                   or image.image.deviceIndependentSize().toSize()
                                   != wanted[1]):
            self._request(*wanted)

    def _target(self) -> tuple[QTransform, QSize, float] | None:
        """Data -> viewport pixels of the visible part of the view box, its size and the
        screen's pixel ratio (None while the layer is not shown in a view)."""
        scene = self.scene()
        box = self.getViewBox()
        if scene is None or box is None or not scene.views():
            return None
        view = scene.views()[0]
        visible = view.mapFromScene(box.mapRectToScene(box.boundingRect())).boundingRect()
        if visible.width() <= 0 or visible.height() <= 0:
            return None
        size = QSize(min(visible.width(), MAX_IMAGE_SIDE), min(visible.height(), MAX_IMAGE_SIDE))
        transform = self.deviceTransform(view.viewportTransform()) \
            * QTransform.fromTranslate(-visible.left(), -visible.top())
        return transform, size, view.devicePixelRatioF()

    def _request(self, transform: QTransform, size: QSize, ratio: float) -> None:
        if self._in_flight:
            return  # when it comes, paint() asks again if the view or data moved on
        self._in_flight = True
        lines, generation = self._visible_lines(), self.generation

        def work(_worker: Worker[LayerImage]) -> LayerImage:
            return LayerImage(render_lines(lines, transform, size, ratio), transform, generation)

        # Delivered on the UI thread, or not at all once the layer is deleted.
        create_worker(work, on_done=self._take_image, on_error=self._render_failed,
                      context=self, pool=dedicated_pool(RENDER_POOL))

    def _take_image(self, image: LayerImage) -> None:
        self._in_flight = False
        self.image = image
        self.update()

    def _render_failed(self, exc: BaseException) -> None:
        self._in_flight = False  # the layer asks again at its next paint
        log.warning("the plot could not be drawn", exc_info=exc)
