"""Tests of cube_display, the IPython extension of the default image.

Run from the repository root with Debian's python3 (python3-ipykernel,
python3-matplotlib, python3-pandas): python3 -m unittest discover image/tests
"""

import datetime
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGES = os.path.join(HERE, "..", "rootfs", "usr", "local", "lib", "python3.11", "dist-packages")
PACKAGES = os.path.normpath(PACKAGES)
KERNEL_CONFIG = os.path.normpath(os.path.join(HERE, "..", "rootfs", "etc", "ipython", "ipython_kernel_config.py"))
sys.path.insert(0, PACKAGES)
os.environ.setdefault("MPLBACKEND", "agg")

import matplotlib  # noqa: E402

matplotlib.use("agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

import cube_display  # noqa: E402
from cube_display import images  # noqa: E402
from cube_display.chart import figure_to_chart  # noqa: E402
from cube_display.data import frame_to_data  # noqa: E402


def chart_of(figure):
    """The chart, checked to be what JSON carries."""
    chart = figure_to_chart(figure)
    plt.close(figure)
    json.dumps(chart, allow_nan=False)
    return chart


class ChartTest(unittest.TestCase):
    def tearDown(self):
        plt.close("all")

    def test_line_with_dates_labels_and_units(self):
        start = datetime.datetime(2024, 3, 1)
        days = [start + datetime.timedelta(days=i) for i in range(30)]
        fig = plt.figure()
        plt.plot(days, np.arange(30) ** 2, label="squares")
        plt.plot(days, np.arange(30), label="ramp")
        plt.title("Growth")
        plt.xlabel("Day [d]")
        plt.ylabel("Size (m)")
        chart = chart_of(fig)
        self.assertEqual(chart["type"], "line")
        self.assertEqual(chart["title"], "Growth")
        self.assertEqual((chart["x_label"], chart["y_label"]), ("Day [d]", "Size (m)"))
        self.assertEqual((chart["x_unit"], chart["y_unit"]), ("d", "m"))
        self.assertEqual((chart["x_scale"], chart["y_scale"]), ("datetime", "linear"))
        self.assertTrue(chart["x_ticks"])
        for tick in chart["x_ticks"]:
            datetime.datetime.fromisoformat(tick)
        self.assertTrue(all(isinstance(t, float) for t in chart["y_ticks"]))
        self.assertEqual(len(chart["x_ticks"]), len(chart["x_tick_labels"]))
        self.assertTrue(all(isinstance(t, str) for t in chart["y_tick_labels"]))
        first, second = chart["elements"]
        self.assertEqual((first["label"], second["label"]), ("squares", "ramp"))
        self.assertEqual(len(first["points"]), 30)
        x, y = first["points"][3]
        self.assertEqual(datetime.datetime.fromisoformat(x), datetime.datetime(2024, 3, 4, tzinfo=datetime.timezone.utc))
        self.assertEqual(y, 9)

    def test_log_scale_and_plain_tick_labels(self):
        fig, ax = plt.subplots()
        ax.plot(np.linspace(1, 10, 10), np.exp(np.linspace(1, 10, 10)), label="e^x")
        ax.set_yscale("log")
        ax.set_ylabel("Growth (log scale)")
        chart = chart_of(fig)
        self.assertEqual((chart["x_scale"], chart["y_scale"]), ("linear", "log"))
        self.assertEqual(chart["y_unit"], "log scale")
        self.assertIsNone(chart["x_unit"])
        self.assertTrue(all("$" not in label and "\\" not in label for label in chart["y_tick_labels"]))
        self.assertEqual(chart["elements"][0]["label"], "e^x")

    def test_categorical_scale(self):
        fig = plt.figure()
        plt.plot([1, 2, 3], ["low", "mid", "high"])
        chart = chart_of(fig)
        self.assertEqual((chart["x_scale"], chart["y_scale"]), ("linear", "categorical"))
        self.assertEqual(chart["y_ticks"], ["low", "mid", "high"])
        self.assertEqual(chart["elements"][0]["points"], [[1, "low"], [2, "mid"], [3, "high"]])
        self.assertIsNone(chart["elements"][0]["label"])  # an unlabelled line

    def test_scatter(self):
        fig, ax = plt.subplots()
        ax.scatter([1, 2, 3], [3, 1, 2], label="first")
        ax.scatter([0.5, 1.5], [2, 2], label="second")
        ax.set_xlabel("width")
        chart = chart_of(fig)
        self.assertEqual(chart["type"], "scatter")
        self.assertIsNone(chart["title"])
        self.assertEqual(chart["x_label"], "width")
        self.assertIsNone(chart["y_label"])
        self.assertEqual([e["label"] for e in chart["elements"]], ["first", "second"])
        self.assertEqual(chart["elements"][0]["points"], [[1, 3], [2, 1], [3, 2]])
        self.assertEqual(len(chart["elements"][1]["points"]), 2)

    def test_bar_groups(self):
        fig, ax = plt.subplots()
        ax.bar(["q1", "q2", "q3"], [5, 7, 3], label="2023")
        ax.bar(["q1", "q2", "q3"], [1, 2, 3], bottom=[5, 7, 3], label="2024")
        ax.set_title("Sales")
        chart = chart_of(fig)
        self.assertEqual(chart["type"], "bar")
        self.assertEqual(chart["title"], "Sales")
        self.assertEqual([e["label"] for e in chart["elements"]], ["q1", "q2", "q3"] * 2)
        self.assertEqual([e["value"] for e in chart["elements"]], [5, 7, 3, 1, 2, 3])
        self.assertEqual([e["group"] for e in chart["elements"]], ["2023"] * 3 + ["2024"] * 3)

    def test_horizontal_bars(self):
        fig, ax = plt.subplots()
        ax.barh(["a", "b"], [2.5, 4], label="h")
        chart = chart_of(fig)
        self.assertEqual(chart["type"], "bar")
        self.assertEqual([(e["label"], e["value"]) for e in chart["elements"]], [("a", 2.5), ("b", 4)])

    def test_pie(self):
        fig, ax = plt.subplots()
        ax.pie([3, 1], labels=["most", "some"], startangle=90, autopct="%1.1f%%")
        ax.set_title("Share")
        chart = chart_of(fig)
        self.assertEqual(chart["type"], "pie")
        self.assertEqual(chart["title"], "Share")
        self.assertEqual(
            chart["elements"],
            [{"label": "most", "angle": 270, "radius": 1}, {"label": "some", "angle": 90, "radius": 1}],
        )

    def _boxes(self, **kwargs):
        fig, ax = plt.subplots()
        ax.boxplot(
            [[85, 90, 78, 92, 88], [95, 89, 76, 91, 84, 87], [75, 82, 88, 79, 86]],
            labels=["A", "B", "C"],
            **kwargs,
        )
        ax.set_xlabel("Class")
        ax.set_ylabel("Score")
        return chart_of(fig)

    def test_box_and_whisker(self):
        for kwargs in ({}, {"patch_artist": True}, {"vert": False}, {"showmeans": True}, {"showmeans": True, "meanline": True}):
            with self.subTest(**kwargs):
                chart = self._boxes(**kwargs)
                self.assertEqual(chart["type"], "box_and_whisker")
                self.assertEqual((chart["x_label"], chart["y_label"]), ("Class", "Score"))
                elements = chart["elements"]
                self.assertEqual([e["label"] for e in elements], ["A", "B", "C"])
                self.assertEqual([e["min"] for e in elements], [78, 84, 75])
                self.assertEqual([e["first_quartile"] for e in elements], [85, 84.75, 79])
                self.assertEqual([e["median"] for e in elements], [88, 88, 82])
                self.assertEqual([e["third_quartile"] for e in elements], [90, 90.5, 86])
                self.assertEqual([e["max"] for e in elements], [92, 95, 88])
                self.assertEqual([e["outliers"] for e in elements], [[], [76], []])

    def test_superchart(self):
        fig, (left, right) = plt.subplots(1, 2)
        fig.suptitle("Both")
        left.plot([0, 1, 2], [2, 1, 0])
        left.set_title("Down")
        right.bar(["x"], [1])
        right.set_title("One bar")
        chart = chart_of(fig)
        self.assertEqual(chart["type"], "superchart")
        self.assertEqual(chart["title"], "Both")
        self.assertEqual([c["type"] for c in chart["elements"]], ["line", "bar"])
        self.assertEqual([c["title"] for c in chart["elements"]], ["Down", "One bar"])
        self.assertEqual(len(chart["elements"][0]["elements"][0]["points"]), 3)

    def test_single_axes_takes_the_suptitle(self):
        fig, ax = plt.subplots()
        fig.suptitle("Figure title")
        ax.plot([1, 2])
        self.assertEqual(chart_of(fig)["title"], "Figure title")

    def test_unknown(self):
        fig, ax = plt.subplots()
        ax.add_patch(plt.Circle((0, 0), 1, fill=False))
        ax.imshow(np.zeros((2, 2)))
        ax.set_title("Shapes")
        self.assertEqual(chart_of(fig), {"type": "unknown", "title": "Shapes", "elements": []})

    def test_colorbar_is_no_chart_of_its_own(self):
        fig, ax = plt.subplots()
        fig.colorbar(ax.imshow(np.arange(4).reshape(2, 2)))
        ax.set_title("Heat")
        self.assertEqual(chart_of(fig), {"type": "unknown", "title": "Heat", "elements": []})

    def test_blank_figure_has_no_chart(self):
        fig, _ = plt.subplots()
        self.assertIsNone(chart_of(fig))
        self.assertIsNone(chart_of(plt.figure()))

    def test_missing_values_are_null(self):
        fig, ax = plt.subplots()
        ax.plot([1, 2, 3], [1, float("nan"), 3])
        points = chart_of(fig)["elements"][0]["points"]
        self.assertEqual(points, [[1, 1], [2, None], [3, 3]])


class DataTest(unittest.TestCase):
    def test_columns(self):
        frame = pd.DataFrame({
            "n": [1, 2, 3],
            "x": [0.5, float("nan"), 2.0],
            "s": ["a", None, "c"],
            "t": pd.to_datetime(["2024-01-01", None, "2024-01-03 12:00"]),
            "b": [True, False, True],
        })
        data = frame_to_data(frame)
        json.dumps(data, allow_nan=False)
        self.assertEqual(data, {
            "n": [1, 2, 3],
            "x": [0.5, None, 2.0],
            "s": ["a", None, "c"],
            "t": ["2024-01-01T00:00:00", None, "2024-01-03T12:00:00"],
            "b": [True, False, True],
        })
        self.assertIs(type(data["n"][0]), int)

    def test_non_string_column_names(self):
        self.assertEqual(frame_to_data(pd.DataFrame({1: [1], "b": ["x"]})), {"1": [1], "b": ["x"]})


class ShellTest(unittest.TestCase):
    """The formatters inside an IPython shell."""

    @classmethod
    def setUpClass(cls):
        from IPython.core.interactiveshell import InteractiveShell

        cls.shell = InteractiveShell.instance()
        cls.shell.extension_manager.load_extension("cube_display")

    def tearDown(self):
        plt.close("all")

    def test_figure_gets_a_chart_and_keeps_its_png(self):
        from IPython.core.pylabtools import select_figure_formats

        # as the inline backend does: it drops every formatter's printer for
        # Figure before registering its PNG one
        select_figure_formats(self.shell, {"png"})
        fig, ax = plt.subplots()
        ax.plot([1, 2, 3], label="l")
        data, _ = self.shell.display_formatter.format(fig)
        self.assertIn("image/png", data)
        self.assertEqual(data["e2b/chart"]["type"], "line")

    def test_dataframe_gets_data_and_keeps_its_html(self):
        data, _ = self.shell.display_formatter.format(pd.DataFrame({"a": [1, 2, 3]}))
        self.assertIn("text/html", data)
        self.assertEqual(data["e2b/data"], {"a": [1, 2, 3]})

    def test_other_objects_get_neither(self):
        data, _ = self.shell.display_formatter.format({"a": 1})
        self.assertNotIn("e2b/chart", data)
        self.assertNotIn("e2b/data", data)

    def test_a_broken_figure_still_shows(self):
        fig, ax = plt.subplots()
        ax.plot([1, 2])
        ax.get_xaxis().get_major_formatter = None  # reading it fails
        data, _ = self.shell.display_formatter.format(fig)
        self.assertNotIn("e2b/chart", data)

    def test_pil_image_is_displayed_when_saved_and_shown(self):
        from PIL import Image, ImageShow

        shown = []
        original = images._display
        images._display = shown.append
        try:
            image = Image.new("RGB", (4, 4), "red")
            with tempfile.TemporaryDirectory() as tmp:
                image.save(os.path.join(tmp, "a.png"))
                self.assertEqual(len(shown), 1)
                import io

                image.save(io.BytesIO(), format="PNG")  # not to a file: not shown
                self.assertEqual(len(shown), 1)
                self.assertTrue(ImageShow.show(image))
                self.assertEqual(len(shown), 2)
        finally:
            images._display = original


def run_python(code):
    env = dict(os.environ, PYTHONPATH=PACKAGES)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True, timeout=120
    )


class LoadTest(unittest.TestCase):
    def test_loading_imports_no_heavy_module(self):
        result = run_python("""
            import sys
            from IPython.core.interactiveshell import InteractiveShell
            InteractiveShell.instance().extension_manager.load_extension("cube_display")
            print(sorted(m for m in ("matplotlib", "pandas", "PIL", "numpy") if m in sys.modules))
        """)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout.strip(), "[]")

    def test_pil_is_patched_when_imported_later(self):
        result = run_python("""
            from IPython.core.interactiveshell import InteractiveShell
            InteractiveShell.instance().extension_manager.load_extension("cube_display")
            from PIL import Image
            print(hasattr(Image.Image.save, "_cube_display_original"))
        """)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout.strip(), "True")


class KernelTest(unittest.TestCase):
    """A real ipykernel with the image's kernel configuration."""

    @classmethod
    def setUpClass(cls):
        from jupyter_client.manager import start_new_kernel

        env = dict(os.environ, PYTHONPATH=PACKAGES, PYDEVD_DISABLE_FILE_VALIDATION="1")
        env.pop("MPLBACKEND", None)
        cls.km, cls.kc = start_new_kernel(
            kernel_name="python3", extra_arguments=["--config=" + KERNEL_CONFIG], env=env
        )

    @classmethod
    def tearDownClass(cls):
        cls.kc.stop_channels()
        cls.km.shutdown_kernel(now=True)

    def run_cell(self, code):
        outputs = []

        def hook(msg):
            if msg["msg_type"] in ("display_data", "execute_result", "error"):
                outputs.append((msg["msg_type"], msg["content"]))

        reply = self.kc.execute_interactive(textwrap.dedent(code), output_hook=hook, timeout=60)
        self.assertEqual(reply["content"]["status"], "ok", outputs)
        return outputs

    def test_plt_show_sends_chart_with_png(self):
        outputs = self.run_cell("""
            import matplotlib.pyplot as plt
            plt.bar(["a", "b"], [1, 2], label="n")
            plt.title("Bars")
            plt.show()
        """)
        self.assertEqual(len(outputs), 1, outputs)
        kind, content = outputs[0]
        self.assertEqual(kind, "display_data")
        self.assertIn("image/png", content["data"])
        chart = content["data"]["e2b/chart"]
        self.assertEqual((chart["type"], chart["title"]), ("bar", "Bars"))
        self.assertEqual([e["value"] for e in chart["elements"]], [1, 2])

    def test_dataframe_result_has_data(self):
        outputs = self.run_cell("""
            import pandas as pd
            pd.DataFrame({"a": [1, 2, 3]})
        """)
        kind, content = outputs[-1]
        self.assertEqual(kind, "execute_result")
        self.assertEqual(content["data"]["e2b/data"], {"a": [1, 2, 3]})
        self.assertIn("text/html", content["data"])

    def test_saved_pil_image_is_a_png_result(self):
        with tempfile.TemporaryDirectory() as tmp:
            outputs = self.run_cell(f"""
                from PIL import Image
                Image.new("RGBA", (8, 8), "blue").save({os.path.join(tmp, "x.png")!r})
            """)
        self.assertEqual([kind for kind, _ in outputs], ["display_data"])
        self.assertIn("image/png", outputs[0][1]["data"])


if __name__ == "__main__":
    unittest.main()
