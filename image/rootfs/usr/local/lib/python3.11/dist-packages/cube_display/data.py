"""The e2b/data view of a pandas DataFrame: its columns by name."""

from .jsonable import plain


def frame_to_data(frame):
    """{column name: [values, top to bottom]}, JSON-ready.

    Column names become strings (a JSON object's keys are); two columns
    whose names read the same keep the first one. Timestamps are ISO 8601,
    missing values (NaN, NaT, None) null.
    """
    data = {}
    for position, name in enumerate(frame.columns):
        key = _key(name)
        if key in data:
            continue
        column = frame.iloc[:, position]
        data[key] = [plain(value) for value in column.tolist()]
    return data


def _key(name):
    if isinstance(name, tuple):  # a MultiIndex column
        return " ".join(str(part) for part in name if str(part) != "")
    return str(name)
