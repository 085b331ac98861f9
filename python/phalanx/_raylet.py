"""Ray's ``ray._raylet`` names that its documentation imports: ``ObjectRef`` and
``ObjectRefGenerator`` (``from ray._raylet import ObjectRefGenerator``)."""

from ._api import ObjectRef, ObjectRefGenerator

StreamingObjectRefGenerator = ObjectRefGenerator  # its name before Ray 2.8

__all__ = ["ObjectRef", "ObjectRefGenerator", "StreamingObjectRefGenerator"]
