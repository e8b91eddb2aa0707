"""Options objects with keyword arguments beside them: the keywords a caller gave replace the object's
fields, and what is wrong comes back as text, so that a collective caller can agree on the error before
raising it on every rank."""

from __future__ import annotations

from sparsewire.errors import InputError

__all__ = ["UNSET", "with_given"]

#: The default of a keyword argument that was not given (so None can mean "choose for me").
UNSET = object()


def with_given(options, kind: type, keywords: dict, what: str):
    """Not collective. ``options`` (an instance of ``kind``; None: its defaults) with the ``keywords`` that
    were given (not :data:`UNSET`) replacing their fields (``kind.replace``), or the text of what is wrong
    (``what``: the object the options make, for the message)."""
    given = {name: value for name, value in keywords.items() if value is not UNSET}
    try:
        if options is not None and not isinstance(options, kind):
            return f"options must be a sparsewire.{kind.__name__} or None (got {type(options).__name__})"
        base = options or kind()
        return base.replace(**given) if given else base
    except InputError as error:
        return str(error)
    except TypeError as error:
        return f"not an option of {what}: {error}"
