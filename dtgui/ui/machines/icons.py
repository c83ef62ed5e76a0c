"""Small status icons painted at run time (no image files): unknown, connecting, ok, warn, error."""

from __future__ import annotations

from functools import lru_cache

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QIcon, QPainter, QPainterPath, QPen, QPixmap

COLORS = {
    "unknown": "#9ca3af",
    "connecting": "#2563eb",
    "ok": "#16a34a",
    "warn": "#d97706",
    "error": "#dc2626",
}
SPINNER_FRAMES = 8
_SIZE = 16
_SCALE = 3  # painted large, shown small: crisp on high-DPI screens too


@lru_cache(maxsize=64)
def status_icon(status: str, frame: int = 0) -> QIcon:
    pix = QPixmap(_SIZE * _SCALE, _SIZE * _SCALE)
    pix.fill(Qt.GlobalColor.transparent)
    p = QPainter(pix)
    p.setRenderHint(QPainter.RenderHint.Antialiasing)
    p.scale(_SCALE, _SCALE)
    color = QColor(COLORS.get(status, COLORS["unknown"]))
    box = QRectF(2, 2, 12, 12)
    white = QPen(QColor("white"), 1.8, Qt.PenStyle.SolidLine, Qt.PenCapStyle.RoundCap,
                 Qt.PenJoinStyle.RoundJoin)
    if status == "connecting":
        p.setPen(QPen(QColor("#dbeafe"), 2.2))
        p.drawEllipse(box)
        p.setPen(QPen(color, 2.2, Qt.PenStyle.SolidLine, Qt.PenCapStyle.RoundCap))
        p.drawArc(box, int((90 - frame * 360 / SPINNER_FRAMES) * 16), -110 * 16)
    elif status == "ok":
        p.setPen(Qt.PenStyle.NoPen)
        p.setBrush(color)
        p.drawEllipse(box)
        path = QPainterPath(QPointF(5.0, 8.2))
        path.lineTo(7.1, 10.3)
        path.lineTo(11.0, 5.9)
        p.setPen(white)
        p.setBrush(Qt.BrushStyle.NoBrush)
        p.drawPath(path)
    elif status in ("error", "warn"):
        p.setPen(Qt.PenStyle.NoPen)
        p.setBrush(color)
        if status == "warn":
            tri = QPainterPath(QPointF(8, 1.5))
            tri.lineTo(15, 14)
            tri.lineTo(1, 14)
            tri.closeSubpath()
            p.drawPath(tri)
            p.setPen(white)
            p.drawLine(QPointF(8, 5.8), QPointF(8, 9.4))
            p.drawPoint(QPointF(8, 11.8))
        else:
            p.drawEllipse(box)
            p.setPen(white)
            p.drawLine(QPointF(5.6, 5.6), QPointF(10.4, 10.4))
            p.drawLine(QPointF(10.4, 5.6), QPointF(5.6, 10.4))
    else:  # unknown: an empty ring
        p.setPen(QPen(color, 1.6))
        p.drawEllipse(QRectF(2.5, 2.5, 11, 11))
    p.end()
    pix.setDevicePixelRatio(_SCALE)
    return QIcon(pix)
