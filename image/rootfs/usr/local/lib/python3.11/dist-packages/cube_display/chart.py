"""The e2b/chart view of a matplotlib figure.

A figure with one drawn-on Axes becomes one chart; with several, a
"superchart" whose elements are the charts of its Axes. A chart's type comes
from what its Axes holds:

- "pie": wedges (Axes.pie);
- "box_and_whisker": the boxes, whiskers and medians of Axes.boxplot;
- "bar": bar containers (Axes.bar, Axes.barh);
- "line": lines (Axes.plot), with any scatter collections beside them;
- "scatter": point collections only (Axes.scatter);
- "unknown": anything else (images, shapes, text), with no elements.

An empty figure has no chart at all.

Everything is read from matplotlib's public objects; matplotlib is imported
only here, which runs once the user has a Figure to show.
"""

import re

from .jsonable import number

LINE = "line"
SCATTER = "scatter"
BAR = "bar"
PIE = "pie"
BOX_AND_WHISKER = "box_and_whisker"
SUPERCHART = "superchart"
UNKNOWN = "unknown"

_UNIT = re.compile(r"[(\[]\s*([^()\[\]]*?)\s*[)\]]\s*$")


def figure_to_chart(figure):
    """The chart dict of figure, or None if nothing is drawn on it."""
    axes = [
        ax for ax in figure.get_axes()
        # a colorbar belongs to the chart beside it, it is not one
        if ax.get_visible() and _has_content(ax) and getattr(ax, "_colorbar", None) is None
    ]
    if not axes:
        return None
    suptitle = _suptitle(figure)
    if len(axes) == 1:
        chart = axes_to_chart(axes[0])
        if chart["title"] is None:
            chart["title"] = suptitle
        return chart
    return {
        "type": SUPERCHART,
        "title": suptitle,
        "elements": [axes_to_chart(ax) for ax in axes],
    }


def axes_to_chart(ax):
    """The chart dict of one Axes."""
    for kind in (_pie, _box_and_whisker, _bar, _points):
        chart = kind(ax)
        if chart is not None:
            return chart
    return {"type": UNKNOWN, "title": _title(ax), "elements": []}


# --- what a figure and an axes say about themselves -------------------------


def _has_content(ax):
    return any(
        len(group)
        for group in (ax.lines, ax.patches, ax.collections, ax.images, ax.texts, ax.tables, ax.artists)
    )


def _suptitle(figure):
    getter = getattr(figure, "get_suptitle", None)  # matplotlib >= 3.8
    if getter is not None:
        return getter() or None
    text = getattr(figure, "_suptitle", None)
    return (text.get_text() or None) if text is not None else None


def _title(ax):
    for loc in ("center", "left", "right"):
        title = ax.get_title(loc)
        if title:
            return title
    return None


def _label_of(artist):
    """An artist's legend label; matplotlib names unlabelled artists
    '_child0', '_line1' and so on, which are not labels."""
    label = artist.get_label()
    if label is None:
        return None
    label = str(label)
    if not label or label.startswith("_"):
        return None
    return label


def _unit(label):
    """The unit in a label's trailing brackets: 'Time (s)' -> 's'."""
    if not label:
        return None
    match = _UNIT.search(label)
    if match is None or not match.group(1):
        return None
    return match.group(1)


def _chart2d(kind, ax):
    x_label = ax.get_xlabel() or None
    y_label = ax.get_ylabel() or None
    return {
        "type": kind,
        "title": _title(ax),
        "x_label": x_label,
        "y_label": y_label,
        "x_unit": _unit(x_label),
        "y_unit": _unit(y_label),
    }


# --- axis scales, values and ticks ------------------------------------------


class _Axis:
    """How one axis turns matplotlib's internal floats into chart values."""

    def __init__(self, axis):
        self.axis = axis
        self.kind = _scale(axis)

    def value(self, v):
        """A chart value: ISO 8601 for dates, the category for categories,
        else a number."""
        if self.kind == "datetime":
            return _date(v)
        if self.kind == "categorical":
            return _category(self.axis, v)
        return number(v)

    def ticks(self):
        """(ticks, tick labels) of the major ticks within the axis' view."""
        low, high = sorted(self.axis.get_view_interval())
        span = high - low
        locs = [
            loc for loc in self.axis.get_majorticklocs()
            if low - 1e-9 * span <= loc <= high + 1e-9 * span
        ]
        formatter = self.axis.get_major_formatter()
        try:
            labels = list(formatter.format_ticks(locs))
        except Exception:
            labels = [str(loc) for loc in locs]
        labels = [_plain_label(label) for label in labels]
        return [self.value(loc) for loc in locs], labels


def _scale(axis):
    """An axis' scale: matplotlib's own name (linear, log, symlog, logit,
    function, functionlog, asinh), but 'datetime' and 'categorical' for a
    linear axis of dates or of strings."""
    scale = axis.get_scale()
    if scale != "linear":
        return scale
    from matplotlib import category, dates

    converter = axis.get_converter() if hasattr(axis, "get_converter") else axis.converter
    if isinstance(axis.units, category.UnitData) or isinstance(converter, category.StrCategoryConverter):
        return "categorical"
    date_converters = tuple(
        c for c in (getattr(dates, name, None) for name in ("DateConverter", "ConciseDateConverter", "_SwitchableDateConverter"))
        if isinstance(c, type)
    )
    if date_converters and isinstance(converter, date_converters):
        return "datetime"
    formatter = axis.get_major_formatter()
    if isinstance(formatter, (dates.DateFormatter, dates.AutoDateFormatter, dates.ConciseDateFormatter)):
        return "datetime"
    return "linear"


def _date(v):
    from matplotlib import dates

    n = number(v, 17)
    if n is None:
        return None
    try:
        return dates.num2date(n).isoformat()
    except (ValueError, OverflowError):
        return None


def _category(axis, v):
    """The category at position v of a categorical axis."""
    units = axis.units
    mapping = getattr(units, "_mapping", None)
    if mapping:
        n = number(v)
        for name, position in mapping.items():
            if n is not None and abs(position - n) < 1e-9:
                return str(name)
    try:
        return str(axis.get_major_formatter()(v))
    except Exception:
        return number(v)


def _point_chart(kind, ax, series):
    """A line or scatter chart of series, a list of (label, xy array)."""
    x, y = _Axis(ax.xaxis), _Axis(ax.yaxis)
    chart = _chart2d(kind, ax)
    x_ticks, x_tick_labels = x.ticks()
    y_ticks, y_tick_labels = y.ticks()
    chart.update(
        x_scale=x.kind,
        y_scale=y.kind,
        x_ticks=x_ticks,
        x_tick_labels=x_tick_labels,
        y_ticks=y_ticks,
        y_tick_labels=y_tick_labels,
        elements=[
            {"label": label, "points": [[x.value(px), y.value(py)] for px, py in xy]}
            for label, xy in series
        ],
    )
    return chart


# --- chart kinds ------------------------------------------------------------


def _pie(ax):
    from matplotlib.patches import Wedge

    wedges = [p for p in ax.patches if isinstance(p, Wedge)]
    if not wedges or ax.containers:
        return None
    return {
        "type": PIE,
        "title": _title(ax),
        "elements": [
            {
                "label": _label_of(w),
                # Axes.pie computes in float32: 7 digits are all there is
                "angle": number(abs(w.theta2 - w.theta1), 6),
                "radius": number(w.r, 6),
            }
            for w in wedges
        ],
    }


def _bar(ax):
    from matplotlib.container import BarContainer

    containers = [c for c in ax.containers if isinstance(c, BarContainer)]
    if not containers:
        return None
    chart = _chart2d(BAR, ax)
    elements = []
    for container in containers:
        group = _label_of(container)
        horizontal = getattr(container, "orientation", None) == "horizontal"
        if horizontal:
            axis, position = ax.yaxis, lambda r: r.get_y() + r.get_height() / 2
            size = lambda r: r.get_width()
        else:
            axis, position = ax.xaxis, lambda r: r.get_x() + r.get_width() / 2
            size = lambda r: r.get_height()
        names = _tick_names(axis)
        for rect in container.patches:
            where = position(rect)
            elements.append({
                "label": _name_at(names, axis, where),
                "value": number(size(rect)),
                "group": group,
            })
    chart["elements"] = elements
    return chart


def _tick_names(axis):
    """{tick position: tick label} of an axis' major ticks."""
    locs = list(axis.get_majorticklocs())
    try:
        labels = axis.get_major_formatter().format_ticks(locs)
    except Exception:
        return {}
    return {loc: _plain_label(label) for loc, label in zip(locs, labels)}


def _plain_label(label):
    """A tick label as text: matplotlib's minus sign as '-', and mathtext
    such as '$\\mathdefault{10^{-9}}$' (log axes) as '10^-9'."""
    label = str(label).replace("\N{MINUS SIGN}", "-")
    if len(label) > 1 and label.startswith("$") and label.endswith("$"):
        label = label[1:-1].replace("\\mathdefault", "").replace("\\times", "x")
        label = label.replace("{", "").replace("}", "").replace("\\", "")
    return label


def _name_at(names, axis, where):
    for loc, label in names.items():
        if abs(loc - where) < 1e-6 and label:
            return label
    value = _Axis(axis).value(where)
    return value if isinstance(value, str) else _short(value)


def _short(n):
    if n is None:
        return None
    return str(int(n)) if float(n).is_integer() else str(n)


def _points(ax):
    lines = [line for line in ax.get_lines() if line.get_visible()]
    from matplotlib.collections import PathCollection

    scatters = [c for c in ax.collections if isinstance(c, PathCollection) and c.get_visible()]
    if not lines and not scatters:
        return None
    series = [(_label_of(line), line.get_xydata()) for line in lines]
    series += [(_label_of(c), c.get_offsets()) for c in scatters]
    return _point_chart(LINE if lines else SCATTER, ax, series)


def _box_and_whisker(ax):
    """Boxes of Axes.boxplot: each a closed rectangle (a patch with
    patch_artist=True, else a line) with a median line across it and two
    whiskers from its ends; fliers are marker-only lines on its centre."""
    boxes = []
    for artist in list(ax.patches) + list(ax.get_lines()):
        rect = _rectangle(artist)
        if rect is not None and not _is_bar(artist):
            boxes.append((artist, rect))
    if not boxes:
        return None
    segments = [(line, _segment(line)) for line in ax.get_lines()]
    segments = [(line, s) for line, s in segments if s is not None]
    markers = [line for line in ax.get_lines() if _marker_only(line)]

    elements = []
    vertical = None
    for artist, (x0, x1, y0, y1) in sorted(boxes, key=lambda b: (b[1][0], b[1][2])):
        found = _read_box(x0, x1, y0, y1, segments, markers, vertical=True)
        is_vertical = True
        if found is None:
            found = _read_box(y0, y1, x0, x1, _swapped(segments), markers, vertical=False)
            is_vertical = False
        if found is None:
            return None
        if vertical is None:
            vertical = is_vertical
        elif vertical != is_vertical:
            return None
        elements.append(found)
    if vertical is False:
        elements.sort(key=lambda e: e["_at"])
    axis = ax.xaxis if vertical else ax.yaxis
    names = _tick_names(axis)
    for e in elements:
        e["label"] = _name_at(names, axis, e.pop("_at"))
    chart = _chart2d(BOX_AND_WHISKER, ax)
    chart["elements"] = [
        {key: e[key] for key in ("label", "min", "first_quartile", "median", "third_quartile", "max", "outliers")}
        for e in elements
    ]
    return chart


def _read_box(x0, x1, q1, q3, segments, markers, vertical):
    """One box across [x0, x1] from q1 to q3 (in the box' own orientation):
    its median, whiskers and fliers, or None if they are not there."""
    centre = (x0 + x1) / 2
    eps = 1e-9 * max(1.0, abs(x1 - x0), abs(q3 - q1))
    median, median_span = None, 0.0
    low, high = q1, q3
    for _, (a, b) in segments:
        (ax0, ay0), (ax1, ay1) = a, b
        if abs(ay0 - ay1) <= eps and min(ax0, ax1) >= x0 - eps and max(ax0, ax1) <= x1 + eps \
                and q1 - eps <= ay0 <= q3 + eps and abs(ax1 - ax0) > eps:
            # caps at a quartile are narrower than the median line; a
            # mean line as wide comes after it
            if abs(ax1 - ax0) > median_span + eps:
                median, median_span = ay0, abs(ax1 - ax0)
        elif abs(ax0 - ax1) <= eps and abs(ax0 - centre) <= eps:
            ends = sorted((ay0, ay1))
            if abs(ends[1] - q1) <= eps:
                low = min(low, ends[0])
            elif abs(ends[0] - q3) <= eps:
                high = max(high, ends[1])
    if median is None:
        return None
    outliers = []
    for line in markers:
        xy = line.get_xydata()
        if len(xy) == 0:
            continue
        along = xy[:, 0] if vertical else xy[:, 1]
        values = xy[:, 1] if vertical else xy[:, 0]
        if all(abs(a - centre) <= max(eps, (x1 - x0) / 2) for a in along):
            outliers.extend(number(v) for v in values if v < low - eps or v > high + eps)
    return {
        "_at": centre,
        "min": number(low),
        "first_quartile": number(q1),
        "median": number(median),
        "third_quartile": number(q3),
        "max": number(high),
        "outliers": sorted(o for o in outliers if o is not None),
    }


def _swapped(segments):
    return [(line, ((a[1], a[0]), (b[1], b[0]))) for line, (a, b) in segments]


def _is_bar(artist):
    from matplotlib.patches import Rectangle

    return isinstance(artist, Rectangle)


def _rectangle(artist):
    """(x0, x1, y0, y1) of an axis-aligned closed rectangle drawn as a path
    patch or a line of five points, else None."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import PathPatch

    if isinstance(artist, PathPatch):
        path = artist.get_path()
        vertices = path.vertices
        if path.codes is not None and len(vertices) and path.codes[-1] == path.CLOSEPOLY:
            vertices = vertices[:-1]
    elif isinstance(artist, Line2D):
        if artist.get_linestyle() in ("None", "none", "", " "):
            return None
        vertices = artist.get_xydata()
    else:
        return None
    if len(vertices) != 5:
        return None
    points = [(float(x), float(y)) for x, y in vertices]
    if points[0] != points[-1]:
        return None
    xs = sorted({x for x, _ in points})
    ys = sorted({y for _, y in points})
    if len(xs) != 2 or len(ys) != 2:
        return None
    for (ax_, ay), (bx, by) in zip(points, points[1:]):
        if ax_ != bx and ay != by:
            return None
    return xs[0], xs[1], ys[0], ys[1]


def _segment(line):
    """The two ends of a drawn two-point line, else None."""
    if line.get_linestyle() in ("None", "none", "", " "):
        return None
    xy = line.get_xydata()
    if len(xy) != 2:
        return None
    return (float(xy[0][0]), float(xy[0][1])), (float(xy[1][0]), float(xy[1][1]))


def _marker_only(line):
    return line.get_linestyle() in ("None", "none", "", " ") and line.get_marker() not in (None, "None", "none", "", " ")
