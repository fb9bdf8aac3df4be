"""`Record`: a dict with attribute access, declared fields with defaults, and nested conversion — the base of
the message, tool and response records in `types` (and of the timing record in `rollout_timing`)."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel


def _dump(value: Any) -> Any:
    if isinstance(value, Record):  # its own model_dump (a record may write out derived fields)
        return value.model_dump()
    if isinstance(value, dict):
        return {k: _dump(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_dump(v) for v in value]
    if isinstance(value, BaseModel):
        return value.model_dump()
    return value


def get_field(obj: Any, key: str) -> Any:
    """`obj[key]` of a dict, else its attribute (None where absent): a message or response as dict or object."""
    return obj.get(key) if isinstance(obj, dict) else getattr(obj, key, None)


class Record(dict):
    """A dict with attribute access, declared fields with defaults, and nested conversion."""

    _defaults: ClassVar[dict[str, Any]] = {}
    _required: ClassVar[tuple[str, ...]] = ()
    _nested: ClassVar[dict[str, Any]] = {}  # field -> converter (a Record class, or a callable)

    def __init__(self, *args: Any, **kwargs: Any):
        data = dict(*args, **kwargs)
        missing = [k for k in self._required if k not in data]
        if missing:
            raise TypeError(f"{type(self).__name__} needs {', '.join(missing)}")
        for k, v in self._defaults.items():
            if v is None:
                if data.get(k, 0) is None:  # unset optional fields stay out of the dict (read as None)
                    del data[k]
            elif k not in data:
                data[k] = v() if v in (dict, list) else v
        for k, conv in self._nested.items():
            # a record of the right class is kept as the same object (as pydantic keeps a model instance)
            if data.get(k) is not None and not (isinstance(conv, type) and isinstance(data[k], conv)):
                data[k] = conv(data[k])
        super().__init__(data)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            return self[name]
        except KeyError:
            if name in self._defaults:  # a declared optional field that is unset
                return None
            raise AttributeError(f"{type(self).__name__} has no field {name!r}") from None

    def __setattr__(self, name: str, value: Any) -> None:
        self[name] = value

    def __delattr__(self, name: str) -> None:
        try:
            del self[name]
        except KeyError:
            raise AttributeError(name) from None

    def __copy__(self) -> Any:
        return type(self)(dict(self))

    def __deepcopy__(self, memo: dict) -> Any:
        import copy

        return type(self)(copy.deepcopy(dict(self), memo))

    def __reduce__(self) -> Any:
        return (type(self), (dict(self),))

    def model_dump(self, exclude_none: bool = False, exclude: Any = None, **_: Any) -> dict[str, Any]:
        out = {k: v for k, v in _dump(dict(self)).items() if k not in (exclude or ())}
        return {k: v for k, v in out.items() if v is not None} if exclude_none else out

    def model_dump_json(self, **kwargs: Any) -> str:
        import json

        return json.dumps(self.model_dump(**kwargs), default=str)

    def model_copy(self, update: dict[str, Any] | None = None, deep: bool = False) -> Any:
        import copy

        base = copy.deepcopy(dict(self)) if deep else dict(self)
        return type(self)({**base, **(update or {})})

    @classmethod
    def model_validate(cls, data: Any) -> Any:
        if isinstance(data, cls):
            return data
        if isinstance(data, BaseModel):
            data = data.model_dump()
        elif not isinstance(data, dict):
            data = {k: getattr(data, k) for k in cls._defaults if hasattr(data, k)}
        return cls(data)
