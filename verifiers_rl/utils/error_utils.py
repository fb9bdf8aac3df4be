"""Error chains and errors as data (`verifiers.utils.error_utils`, verifiers 0.3): `error_from_data` rebuilds the
most specific `vf.Error` class named in `error_data`'s chain, so a serialized error (a saved state, a worker's
reply) still passes `isinstance(err, vf.InfraError)`.
"""


from __future__ import annotations

from typing import Any, Callable

from verifiers_rl import errors as vf_errors

_DATA_KEYS = {"error", "message", "error_chain_repr", "error_chain_str"}


def get_error_chain(error: BaseException | None,
                    parent_type: type[BaseException] | None = None) -> list[BaseException]:
    """`error`, its `__cause__`, its cause's cause, ...; stopping at the first not of `parent_type` if given."""
    chain: list[BaseException] = []
    while error is not None and (parent_type is None or isinstance(error, parent_type)):
        chain.append(error)
        error = error.__cause__
    return chain


def get_vf_error_chain(error: BaseException) -> list[vf_errors.Error]:
    return get_error_chain(error, parent_type=vf_errors.Error)  # type: ignore[return-value]


class ErrorChain:
    """An error and its causes: `str` gives the type names (`A -> B`), `repr` the errors, `in` tests a class."""

    def __init__(self, error: BaseException,
                 build_error_chain: Callable[[BaseException], list[BaseException]] = get_error_chain):
        self.root_error = error
        self.chain = build_error_chain(error)

    def _names(self) -> tuple[str, ...]:
        return tuple(type(e).__name__ for e in self.chain)

    def __hash__(self) -> int:
        return hash(self._names())

    def __eq__(self, other: object) -> bool:
        return self._names() == other._names() if isinstance(other, ErrorChain) else NotImplemented

    def __contains__(self, error_cls: type[BaseException]) -> bool:
        return any(isinstance(e, error_cls) for e in self.chain)

    def __str__(self) -> str:
        return " -> ".join(self._names())

    def __repr__(self) -> str:
        return " -> ".join(repr(e) for e in self.chain)


def error_data(error: BaseException) -> dict[str, str]:
    chain = ErrorChain(error)
    return {"error": type(error).__name__, "message": str(error) or type(error).__name__,
            "error_chain_repr": repr(chain), "error_chain_str": str(chain)}


def is_error_data(value: object) -> bool:
    return isinstance(value, dict) and set(value) == _DATA_KEYS and all(isinstance(v, str) for v in value.values())


def validate_error_data(value: object) -> dict[str, str]:
    if not is_error_data(value):
        raise TypeError("ErrorData must contain string error, message, error_chain_repr, and error_chain_str fields.")
    return value  # type: ignore[return-value]


def vf_error_types() -> tuple[type[vf_errors.Error], ...]:
    """verifiers' error classes, most specific first (a subclass before its base)."""
    classes = [getattr(vf_errors, name) for name in vf_errors.__all__]
    return tuple(sorted(classes, key=lambda c: -len(c.__mro__)))


def error_data_to_exception(error: dict[str, str], error_types: tuple[type[Exception], ...]) -> Exception | None:
    """The first of `error_types` named in the serialized chain, built with the chain's text."""
    names = set((error.get("error_chain_str") or error["error"]).split(" -> "))
    detail = error.get("error_chain_repr") or error["error"]
    return next((t(detail) for t in error_types if t.__name__ in names), None)


def error_from_data(error: dict[str, Any]) -> vf_errors.Error:
    rebuilt = error_data_to_exception(error, vf_error_types())
    return rebuilt if isinstance(rebuilt, vf_errors.Error) else vf_errors.Error(error.get("error_chain_repr")
                                                                               or error["error"])
