"""The installed version of gradaudit (a leaf module: reporters read it without importing the engine)."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("gradaudit")
except PackageNotFoundError:  # running from a source tree
    __version__ = "0.0.0+src"
