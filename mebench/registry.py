"""Name -> factory registries for attacks and models.

Registration is explicit (a decorator) and duplicate names raise, so two
plugins can never silently shadow each other. Built-ins register when their
package is imported (``mebench.attacks``, ``mebench.models``, ``mebench.data``); third-party packages register through the entry-point
groups ``mebench.attacks`` and ``mebench.models``, loaded on first lookup.
See docs/extending/index.md.
"""

from __future__ import annotations

import difflib
from importlib.metadata import entry_points
from typing import Callable, Generic, Iterator, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """A named collection of plugins, filled by ``@registry.register(name)``."""

    def __init__(self, kind: str, entry_point_group: str) -> None:
        self.kind = kind
        self.group = entry_point_group
        self._items: dict[str, T] = {}
        self._entry_points_loaded = False

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: ``@MODELS.register("lenet5")``. Raises on a duplicate name."""

        def deco(obj: T) -> T:
            if name in self._items:
                raise ValueError(f"{self.kind} '{name}' is already registered")
            self._items[name] = obj
            return obj

        return deco

    def _load_entry_points(self) -> None:
        if self._entry_points_loaded:
            return
        self._entry_points_loaded = True
        for ep in entry_points(group=self.group):
            if ep.name not in self._items:
                ep.load()

    def names(self, pattern: str = "*") -> list[str]:
        """Sorted names, optionally filtered by a shell-style pattern (``"vgg*"``)."""
        import fnmatch

        self._load_entry_points()
        return sorted(n for n in self._items if fnmatch.fnmatch(n, pattern))

    def __contains__(self, name: object) -> bool:
        self._load_entry_points()
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def values(self) -> list[T]:
        """Every plugin, in registration order."""
        self._load_entry_points()
        return list(self._items.values())

    def get(self, name: str) -> T:
        """The plugin called ``name``; an unknown name gets the nearest suggestion."""
        self._load_entry_points()
        try:
            return self._items[name]
        except KeyError:
            raise KeyError(unknown_name_message(self.kind, name, self._items)) from None

    def unregister(self, name: str) -> None:
        """Remove a plugin (used by tests that register temporary plugins)."""
        self._items.pop(name, None)


def unknown_name_message(kind: str, name: str, valid: object) -> str:
    """'unknown model 'lenet' (did you mean 'lenet5'?); valid: ...'."""
    names = sorted(valid)  # type: ignore[call-overload]
    close = difflib.get_close_matches(str(name), names, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return f"unknown {kind} '{name}'{hint}; valid: {', '.join(names)}"
