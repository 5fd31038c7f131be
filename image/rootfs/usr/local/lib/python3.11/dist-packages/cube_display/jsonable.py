"""Plain JSON values from numpy, pandas and datetime ones."""

import datetime
import math


def number(value, digits=12):
    """A float of at most `digits` significant digits, or None when it is not
    finite (JSON has no NaN nor infinity). Rounding hides the noise of
    floating point arithmetic: a slice of 90 % of a pie is 324 degrees, not
    323.99999999999994."""
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(f):
        return None
    if f == 0:
        return 0.0
    return float(f"{f:.{digits}g}")


def plain(value):
    """value as something json.dumps takes: numpy scalars become Python
    numbers, timestamps ISO 8601 strings, NaN and NaT None."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        if value != value:  # pandas.NaT is a datetime too
            return None
        return value.isoformat()
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    module = type(value).__module__ or ""
    if module == "numpy" or module.startswith(("numpy.", "pandas.")):
        return _plain_foreign(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _plain_foreign(value):
    import numpy

    if isinstance(value, numpy.ndarray):
        return [plain(v) for v in value.tolist()]
    if isinstance(value, numpy.bool_):
        return bool(value)
    if isinstance(value, numpy.integer):
        return int(value)
    if isinstance(value, numpy.floating):
        return plain(float(value))
    if isinstance(value, numpy.datetime64):
        if numpy.isnat(value):
            return None
        return str(numpy.datetime_as_string(value))
    if isinstance(value, numpy.timedelta64):
        if numpy.isnat(value):
            return None
        return value / numpy.timedelta64(1, "s")
    pandas = __import__("sys").modules.get("pandas")
    if pandas is not None:
        if value is pandas.NaT or value is getattr(pandas, "NA", object()):
            return None
        if isinstance(value, pandas.Timestamp):
            return value.isoformat()
        if isinstance(value, pandas.Timedelta):
            return value.total_seconds()
        if isinstance(value, pandas.Interval):
            return str(value)
        if isinstance(value, pandas.Period):
            return str(value)
    if hasattr(value, "item"):
        try:
            return plain(value.item())
        except Exception:
            pass
    return str(value)
