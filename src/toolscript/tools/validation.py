"""Checking a call's arguments against its tool's input schema, before dispatch.

A refused call raises `ToolError` in the script with the sentence `validate` returns, so the
sentence names the argument as the tool knows it and, when different, as the script spelled
it (`argument 'file-path' (file_path in Python) must be of type string, got 5`).

Broken schemas. Goal: `validate` never raises, whatever the schema. What fails: a schema that
is not valid JSON Schema, or one whose `$ref` cannot be resolved, makes the validator raise,
at construction or in the middle of a call. What we do: the schema is checked once, when the
validator is built (under the draft it declares; without `$schema`, Draft 2020-12 and then
Draft 7, which many MCP servers write without saying so). If it is broken, `broken` says why
and `validate` returns a sentence saying the arguments cannot be checked. The host decides
what to do with such a tool: the tool's own side (an MCP server) usually validates its input
itself, so dispatching anyway is reasonable, while refusing is the cautious choice.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jsonschema.exceptions import ValidationError  # type: ignore[import-untyped]

from toolscript.kernel.brief import brief

_BRIEF = 60


class ArgumentValidator:
    """The input schema of one tool, compiled once, checking each call's arguments."""

    def __init__(self, schema: object, plan: Mapping[str, Any] | None = None) -> None:
        """Compile `schema`. `plan` (the tool's binding plan) supplies the Python spellings."""
        self.spellings: dict[str, str] = {}
        if plan is not None and isinstance(plan.get("parameters"), list):
            self.spellings = {
                str(p["name"]): str(p["spelling"])
                for p in plan["parameters"]
                if isinstance(p, Mapping) and "name" in p and "spelling" in p
            }
        self.broken: str | None = None
        self.validator: Any = None
        self._fast: Any = None
        try:
            self.validator = _compile(schema)
        except Exception as error:
            self.broken = _first_line(error)
        else:
            self._fast = _compile_fast(schema, type(self.validator).__name__)

    def validate(self, arguments: object, *, decoded: bool = False) -> str | None:
        """`None` if `arguments` fit the schema, else a sentence naming what is wrong.

        Never raises. `decoded=True` says the arguments came out of a JSON decoder, which
        bounds their nesting (about 1,000 levels); only then is the fast validator used, since
        it overflows its stack on values nested a hundred thousand levels deep.
        """
        if self.validator is None:
            return f"the tool's input schema is broken ({self.broken}), so its arguments cannot be checked"
        fast = self._fast
        if fast is not None and decoded:
            try:
                if fast.is_valid(arguments):
                    return None
            except Exception:  # the Python validator below has the last word
                pass
        try:
            if self.validator.is_valid(arguments):
                return None
            from jsonschema.exceptions import best_match

            error = best_match(self.validator.iter_errors(arguments))
            if error is None:
                return "the arguments do not fit the tool's input schema"
            return self.describe(error, arguments)
        except RecursionError:
            return "the arguments are nested too deeply to be checked"
        except Exception as error:
            why = _first_line(error)
            return f"the tool's input schema is broken ({why}), so its arguments cannot be checked"

    def label(self, name: str) -> str:
        spelling = self.spellings.get(name)
        if spelling is None or spelling == name:
            return f"argument {name!r}"
        return f"argument {name!r} ({spelling} in Python)"

    def describe(self, error: ValidationError, arguments: object = None) -> str:
        """`error` in a sentence; `arguments`, the call's, name what jsonschema leaves out."""
        path = list(error.absolute_path)
        kind = error.validator
        if kind == "required" and isinstance(error.instance, dict):
            missing = [name for name in _names(error.validator_value) if name not in error.instance]
            if missing:
                if not path:
                    return f"missing required {self.label(missing[0])}"
                return f"{self.where(path)} lacks the required field {missing[0]!r}"
        if kind == "additionalProperties" and isinstance(error.instance, dict):
            known = error.schema.get("properties", {}) if isinstance(error.schema, dict) else {}
            patterns = (
                error.schema.get("patternProperties") if isinstance(error.schema, dict) else None
            )
            unknown = [name for name in error.instance if name not in known]
            if unknown and not patterns:
                if not path:
                    return f"unknown argument {unknown[0]!r}"
                return f"{self.where(path)} has an unknown field {unknown[0]!r}"
        subject = self.where(path)
        got = brief(error.instance, _BRIEF)
        if kind is None:  # a `false` schema: no value is allowed where it stands
            within = list(error.schema_path)[-1:]
            if not path and within == ["properties"] and isinstance(arguments, dict):
                # jsonschema leaves the property out of the path: the arguments say which.
                schema = getattr(self.validator, "schema", None)
                properties = schema.get("properties", {}) if isinstance(schema, dict) else {}
                for name, allowed in properties.items():
                    if allowed is False and name in arguments:
                        return f"{self.label(name)} is not allowed (the schema allows no value)"
            if within in (["items"], ["prefixItems"], ["additionalItems"]):
                return f"{subject} may not hold that item (the schema allows none), got {got}"
            return f"{subject} is not allowed here (the schema allows no value), got {got}"
        if kind == "type":
            expected = " or ".join(_names(error.validator_value)) or str(error.validator_value)
            return f"{subject} must be of type {expected}, got {got}"
        if kind == "enum":
            return f"{subject} must be one of {brief(error.validator_value, _BRIEF)}, got {got}"
        if kind == "const":
            return f"{subject} must be {brief(error.validator_value, _BRIEF)}, got {got}"
        wanted = brief(error.validator_value, _BRIEF)
        return f"{subject} does not satisfy `{kind}: {wanted}` (got {got})"

    def where(self, path: list[str | int]) -> str:
        if not path or not isinstance(path[0], str):
            return "the arguments" + "".join(f"[{step!r}]" for step in path)
        head = self.label(path[0])
        rest = "".join(f"[{step!r}]" for step in path[1:])
        return f"{head} at {rest}" if rest else head


def _compile(schema: object) -> Any:
    # jsonschema loads with the first schema, not with the package (a third of its import).
    import jsonschema  # type: ignore[import-untyped]

    if isinstance(schema, bool):
        return jsonschema.Draft202012Validator(schema)
    if not isinstance(schema, dict):
        raise TypeError(f"it is a {type(schema).__name__}, not an object")
    declared = "$schema" in schema
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError:
        if declared:
            raise
        cls = jsonschema.Draft7Validator
        cls.check_schema(schema)
    return cls(schema)


def _compile_fast(schema: object, draft: str) -> Any:
    """The same schema under the same draft in jsonschema-rs, or None where it cannot be.

    Goal: validation is on every call's path, and the Python validator costs ~20 µs a call.
    jsonschema-rs answers "valid" in well under a microsecond. It only ever accepts: when it
    says no (or cannot say, as for strings with lone surrogates), the Python validator decides
    and writes the sentence, so a refusal always comes with the same words.
    """
    import jsonschema_rs

    validator_class = getattr(jsonschema_rs, draft, None)
    if validator_class is None:
        return None
    try:
        return validator_class(schema)
    except Exception:
        return None


def _names(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [str(item) for item in value]
    return []


def _first_line(error: BaseException) -> str:
    try:
        text = str(error).strip().split("\n", 1)[0]
    except Exception:
        text = ""
    text = text or type(error).__name__
    return text if len(text) <= 160 else text[:159] + "…"
