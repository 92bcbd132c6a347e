"""One error root: what the library raises on purpose is a ``DataflowKafkaError``, each
class also the built-in a Python user expects; read with ``ast`` over the installed package's
modules, so a new ``raise ValueError(...)`` fails here."""

from __future__ import annotations

import ast
import builtins

import pytest

from dataflow_kafka import errors
from tests.test_architecture import library_modules

# raised for a library bug or an abstract method, or by Python's own protocols (a module's or an
# immutable value's attributes), not for anything a user did
ALLOWED_BUILTINS = {"NotImplementedError", "AssertionError", "AttributeError"}


def _builtin_raises() -> list[str]:
    found = []
    for module, path in library_modules().items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Raise) and node.exc is not None:
                if not isinstance(node.exc, ast.Call):
                    continue               # a bare class: a protocol signal (json's default hook), caught inside
                name = node.exc.func.id if isinstance(node.exc.func, ast.Name) else None
                if (name and isinstance(getattr(builtins, name, None), type)
                        and issubclass(getattr(builtins, name), BaseException) and name not in ALLOWED_BUILTINS):
                    found.append(f"{module}:{node.lineno} raise {name}")
    return found


def test_the_library_raises_no_bare_builtin_exceptions():
    assert _builtin_raises() == []


@pytest.mark.parametrize("name", [n for n in errors.__all__ if isinstance(getattr(errors, n), type)])
def test_every_error_is_under_the_root(name):
    assert issubclass(getattr(errors, name), errors.DataflowKafkaError)


@pytest.mark.parametrize("cls, builtin", [
    (errors.InvalidArgumentError, ValueError), (errors.ArgumentTypeError, TypeError), (errors.NotFoundError, KeyError),
    (errors.KafkaUnavailableError, ConnectionError), (errors.KafkaAuthorizationError, PermissionError),
    (errors.KafkaClientError, RuntimeError), (errors.KafkaTimeoutError, TimeoutError), (errors.CapacityError, OverflowError), (errors.TraceTypeError, TypeError),
])
def test_each_error_is_also_the_builtin_a_user_expects(cls, builtin):
    assert issubclass(cls, builtin)


def test_not_found_keeps_its_message_unquoted():
    assert str(errors.NotFoundError("remove_window('x'): no such query")) == "remove_window('x'): no such query"


def test_every_error_class_has_its_own_stable_condition():
    classes = [getattr(errors, n) for n in errors.__all__ if isinstance(getattr(errors, n), type)]
    conditions = [c.__dict__.get("condition") for c in classes]
    assert all(conditions), [c.__name__ for c in classes if "condition" not in c.__dict__]
    assert len(set(conditions)) == len(conditions)
    for c in classes:                   # a subcondition names its parent's condition first
        parent = c.__mro__[1]
        if "." in c.condition and issubclass(parent, errors.DataflowKafkaError):
            assert c.condition.split(".")[0] == parent.condition.split(".")[0], c


def test_security_errors_are_never_retried_as_connection_errors():
    for cls in (errors.KafkaAuthenticationError, errors.KafkaTlsError, errors.KafkaSecurityError):
        assert not issubclass(cls, (ConnectionError, OSError)), cls


def test_a_fused_stage_routing_bug_is_not_a_bad_argument():
    assert not issubclass(errors.FusionError, ValueError)


def test_the_errors_page_is_generated_from_the_classes():
    from pathlib import Path

    page = (Path(__file__).parent.parent / "docs" / "errors.md").read_text()
    assert page.endswith(errors.conditions_table()), "regenerate docs/errors.md from errors.conditions_table()"


def test_the_errors_docstring_tree_names_every_class():
    tree = errors.__doc__
    drawn = tree[tree.index("::"):]
    missing = [n for n in errors.__all__ if isinstance(getattr(errors, n), type) and n not in drawn]
    assert missing == [], missing
