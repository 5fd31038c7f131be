"""PNG results for PIL images that are shown or saved.

A sandbox has no screen: PIL's Image.show() finds no viewer and does
nothing. Here it displays the image in the kernel's output instead, and
Image.save() to a file name or path also displays what it saved, so the
image comes back to the client as a result's PNG.

PIL is not imported here: the hooks are put in place when the user's code
(or matplotlib) first imports PIL.Image or PIL.ImageShow.
"""

import importlib.abc
import os
import sys

_PATCHED = "_cube_display_original"


def _display(image):
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:
        return
    if get_ipython() is None:
        return
    try:
        display(image)
    except Exception:
        pass


def patch_image(module):
    """Image.save: display the image after saving it to a named file."""
    cls = getattr(module, "Image", None)
    if cls is None or hasattr(cls.save, _PATCHED):
        return
    original = cls.save

    def save(self, fp, format=None, **params):
        result = original(self, fp, format, **params)
        if isinstance(fp, (str, bytes, os.PathLike)):
            _display(self)
        return result

    save.__doc__ = original.__doc__
    save.__name__ = original.__name__
    save.__qualname__ = original.__qualname__
    setattr(save, _PATCHED, original)
    cls.save = save


def patch_imageshow(module):
    """ImageShow: a viewer, first in line, that displays in the kernel."""
    if any(getattr(v, _PATCHED, False) for v in getattr(module, "_viewers", [])):
        return

    class KernelViewer(module.Viewer):
        format = "PNG"

        def show(self, image, **options):
            _display(image)
            return 1

    setattr(KernelViewer, _PATCHED, True)
    module.register(KernelViewer, order=-1)


_HOOKS = {"PIL.Image": patch_image, "PIL.ImageShow": patch_imageshow}


class _Loader(importlib.abc.Loader):
    """Runs a module with its own loader, then patches it."""

    def __init__(self, loader, hook):
        self._loader = loader
        self._hook = hook

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        try:
            self._hook(module)
        except Exception:
            pass

    def __getattr__(self, name):
        return getattr(self._loader, name)


class _Finder(importlib.abc.MetaPathFinder):
    """Finds the hooked modules with the other finders, wrapping the loader."""

    def find_spec(self, name, path=None, target=None):
        hook = _HOOKS.get(name)
        if hook is None:
            return None
        for finder in sys.meta_path:
            if finder is self or isinstance(finder, _Finder):
                continue
            find = getattr(finder, "find_spec", None)
            if find is None:
                continue
            spec = find(name, path, target)
            if spec is None:
                continue
            if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                spec.loader = _Loader(spec.loader, hook)
            return spec
        return None


def install():
    """Patches PIL now if it is imported, else when it is."""
    for name, hook in _HOOKS.items():
        module = sys.modules.get(name)
        if module is not None:
            try:
                hook(module)
            except Exception:
                pass
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


def uninstall():
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _Finder)]
    image = sys.modules.get("PIL.Image")
    if image is not None:
        original = getattr(image.Image.save, _PATCHED, None)
        if original is not None:
            image.Image.save = original
    show = sys.modules.get("PIL.ImageShow")
    if show is not None:
        show._viewers[:] = [v for v in show._viewers if not getattr(v, _PATCHED, False)]
