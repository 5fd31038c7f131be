"""Cube's display extension for IPython kernels.

Loaded into every Python kernel of the default template (see
/etc/ipython/ipython_kernel_config.py). It adds the structured outputs that
E2B's code interpreter clients read next to the usual MIME types:

- "e2b/chart": a description of a displayed matplotlib figure (chart type,
  title, axis labels, scales, ticks and its elements), beside its PNG;
- "e2b/data": the columns of a pandas DataFrame, beside its HTML table;
- a PNG result for a PIL image that is shown (Image.show) or saved to a
  file (Image.save), as the sandbox has no image viewer.

Loading it imports neither matplotlib, pandas nor PIL: the formatters are
registered by type name and the PIL hooks wait for PIL to be imported.
"""

import sys

from IPython.core.formatters import BaseFormatter
from traitlets import ObjectName, Unicode

__all__ = ["load_ipython_extension", "unload_ipython_extension"]

CHART_MIME = "e2b/chart"
DATA_MIME = "e2b/data"


def _is_a(obj, module, name):
    """isinstance(obj, module.name), without importing module."""
    for cls in type(obj).__mro__:
        if cls.__name__ == name and cls.__module__ == module:
            return True
    return False


class StructuredFormatter(BaseFormatter):
    """A formatter whose values are JSON objects rather than strings.

    Its own printer (for_module, for_name, printer) is called for instances
    of that class, unless the user registered one of theirs for it. It is
    kept out of the type registry, which others clear: enabling matplotlib's
    inline backend drops every formatter's printer for Figure. Printers
    return a dict, or None when they have nothing to say about an object;
    they must not raise, as a formatter's error would be shown to the user
    as part of the cell's output.
    """

    _return_type = (dict, list)
    for_module = None
    for_name = None

    def printer(self, obj):
        return None

    def __call__(self, obj):
        if self.enabled and self.for_name and _is_a(obj, self.for_module, self.for_name):
            try:
                self.lookup(obj)
            except KeyError:
                return self.printer(obj)
        return super().__call__(obj)


class ChartFormatter(StructuredFormatter):
    format_type = Unicode(CHART_MIME)
    print_method = ObjectName("_repr_e2b_chart_")
    for_module, for_name = "matplotlib.figure", "Figure"

    def printer(self, obj):
        return _figure_printer(obj)


class DataFormatter(StructuredFormatter):
    format_type = Unicode(DATA_MIME)
    print_method = ObjectName("_repr_e2b_data_")
    for_module, for_name = "pandas.core.frame", "DataFrame"

    def printer(self, obj):
        return _frame_printer(obj)


def _figure_printer(figure):
    from .chart import figure_to_chart

    try:
        return figure_to_chart(figure)
    except Exception:  # a chart we cannot read keeps its PNG, nothing more
        return None


def _frame_printer(frame):
    from .data import frame_to_data

    try:
        return frame_to_data(frame)
    except Exception:
        return None


def register_formatters(shell):
    """Adds the e2b/chart and e2b/data formatters to shell's display formatter."""
    formatters = shell.display_formatter.formatters
    chart = formatters.get(CHART_MIME)
    if not isinstance(chart, ChartFormatter):
        chart = ChartFormatter(parent=shell.display_formatter)
        formatters[CHART_MIME] = chart
    data = formatters.get(DATA_MIME)
    if not isinstance(data, DataFormatter):
        data = DataFormatter(parent=shell.display_formatter)
        formatters[DATA_MIME] = data
    return chart, data


def load_ipython_extension(shell):
    register_formatters(shell)
    from . import images

    images.install()


def unload_ipython_extension(shell):
    formatters = shell.display_formatter.formatters
    for mime, cls in ((CHART_MIME, ChartFormatter), (DATA_MIME, DataFormatter)):
        if isinstance(formatters.get(mime), cls):
            del formatters[mime]
    if "cube_display.images" in sys.modules:
        sys.modules["cube_display.images"].uninstall()
