"""The Arrow schemas of the corpus: one definition, used by importers, the store, validation and docs.

Every column carries a description in its field metadata; `docs/schema.md` is generated from it
(`python -m schemas.docs`), so the documentation cannot drift from the code.
"""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa

SCHEMA_VERSION = "1.0.0"

DOMAINS: tuple[str, ...] = ("mcp", "search", "terminal", "swe", "web", "os", "android")


def check_domains(option: str, names: Iterable[str]) -> None:
    """A ValueError naming `option` and the names in `names` that are not domains, if any."""
    unknown = sorted(set(names) - set(DOMAINS))
    if unknown:
        raise ValueError(f"{option} {', '.join(unknown)}: not a domain; the domains are {', '.join(DOMAINS)}")

TURN_KINDS: dict[str, str] = {
    "env": "the action touched the environment; `observation` is what the environment returned",
    "message": "an agent message or thought that did not touch the environment (kept as context)",
    "user": "a user or task message that arrived mid-session (kept as context)",
}

OBSERVATION_KINDS: dict[str, str] = {
    "stdout": "terminal output (stdout and stderr as the agent saw them)",
    "tool_result": "the result payload of a structured tool / function call",
    "file_view": "an editor or file-viewer window shown by an agent tool",
    "accessibility_tree": "a web accessibility tree (AXTree) after the action",
    "view_hierarchy": "an Android view hierarchy after the action",
    "search_results": "results of a search or lookup tool",
    "terminal_screen": "a terminal screen or recording segment",
    "user_reply": "the reply of a (simulated) user, environment output in conversational tasks",
    "error": "an error raised by the environment or harness instead of a normal result",
    "none": "no observation was recorded",
}


def _f(name: str, typ: pa.DataType, doc: str, nullable: bool = True) -> pa.Field:
    return pa.field(name, typ, nullable=nullable, metadata={"doc": doc})


TS = pa.timestamp("us", tz="UTC")

TRAJECTORIES = pa.schema(
    [
        _f("trajectory_id", pa.string(), "stable id: hash of source format and record digest (imported: the input file's sha256 and the record's locator in it, for a tar member the archive's sha256 and the member's path; collected: run, session and spec)", False),
        _f("schema_version", pa.string(), "schema version the row was written with", False),
        _f("domain", pa.string(), "one of " + ", ".join(DOMAINS), False),
        _f("source_format", pa.string(), "importer format name, e.g. `swe-agent`", False),
        _f("source", pa.string(), "path of the input file (archive members as `archive!member`)", False),
        _f("locator", pa.string(), "where the record sits inside the source (`$`, `line:7`, `key:12`, `row:3`)", False),
        _f("native_id", pa.string(), "the id the source format gives the record, if any"),
        _f("task", pa.string(), "the instruction or problem statement the agent worked on"),
        _f("action_space", pa.string(), "JSON list of tool schemas / allowed commands, if known"),
        _f("initial_state", pa.string(), "environment state before the first action, if recorded"),
        _f("agent", pa.string(), "agent or harness name"),
        _f("model", pa.string(), "model that drove the agent"),
        _f("outcome", pa.string(), "terminal status as the source reports it (`submitted`, `success`, ...)"),
        _f("reward", pa.float64(), "final reward / score, if the source has one"),
        _f("env_fingerprint", pa.string(), "JSON: image digest, server version, tool-schema hash, ..."),
        _f("collected_at", TS, "when the session was recorded, if known"),
        _f("license", pa.string(), "licence of the data, if known"),
        _f("num_turns", pa.int32(), "number of rows in `turns` for this trajectory", False),
        _f("importer", pa.string(), "importer class that produced the row", False),
        _f("importer_version", pa.string(), "version of that importer", False),
        _f("metadata", pa.string(), "JSON object of format-specific extras"),
    ]
)

TURNS = pa.schema(
    [
        _f("trajectory_id", pa.string(), "the trajectory this turn belongs to", False),
        _f("turn_index", pa.int32(), "0-based position in the trajectory", False),
        _f("domain", pa.string(), "copied from the trajectory, for partitioning", False),
        _f("kind", pa.string(), "one of " + ", ".join(TURN_KINDS), False),
        _f("action", pa.string(), "canonical action text (command, tool call, GUI action)"),
        _f("tool_name", pa.string(), "structured tool / function name"),
        _f("tool_args", pa.string(), "JSON of the structured tool arguments"),
        _f("tool_call_id", pa.string(), "id linking the call to its result in the source"),
        _f("thought", pa.string(), "the agent's reasoning before the action"),
        _f("observation", pa.string(), "what the environment returned, verbatim"),
        _f("observation_kind", pa.string(), "one of " + ", ".join(OBSERVATION_KINDS)),
        _f("stdout", pa.string(), "stdout alone, when recorded separately"),
        _f("stderr", pa.string(), "stderr alone, when recorded separately"),
        _f("exit_code", pa.int32(), "process exit code of a shell action"),
        _f("is_error", pa.bool_(), "the environment reported an error for this action"),
        _f("reward", pa.float64(), "per-turn reward, if the source has one"),
        _f("started_at", TS, "when the action started"),
        _f("duration_s", pa.float64(), "seconds the action took in the environment"),
        _f("perturbation", pa.string(), "label of an injected fault / edge case, null if none"),
        _f("state", pa.string(), "JSON of environment state after the turn (cwd, open file, URL, ...)"),
        _f("locator", pa.string(), "where the turn's native record sits inside the source"),
        _f("metadata", pa.string(), "JSON object of format-specific extras"),
    ]
)

QUARANTINE = pa.schema(
    [
        _f("source", pa.string(), "path of the input (archive members as `archive!member`)", False),
        _f("locator", pa.string(), "where in the source (`$`, `line:7`, `byte:1024`)", False),
        _f("reason", pa.string(), "short machine-readable reason code", False),
        _f("detail", pa.string(), "human-readable explanation naming record and turn"),
        _f("importer", pa.string(), "importer that rejected it, if one was chosen"),
        _f("input_sha256", pa.string(), "sha256 of the input the record came from"),
        _f("excerpt", pa.string(), "first bytes of the offending record, for inspection"),
    ]
)

TABLES: dict[str, pa.Schema] = {
    "trajectories": TRAJECTORIES,
    "turns": TURNS,
    "quarantine": QUARANTINE,
}

SIDE_TABLE_KEYS = (
    _f("trajectory_id", pa.string(), "key: the trajectory the row is about", False),
    _f("turn_index", pa.int32(), "key: the turn, or null when the row is about a whole trajectory"),
)


def side_table_schema(fields: list[pa.Field]) -> pa.Schema:
    """Schema of a stage's side table: the shared keys, then the stage's own columns.

    Stages never rewrite `trajectories`/`turns`; they add rows keyed by
    (`trajectory_id`, `turn_index`) so that thresholds can change without recomputation.
    """
    names = {f.name for f in fields}
    clash = names & {k.name for k in SIDE_TABLE_KEYS}
    if clash:
        raise ValueError(f"side table redeclares key columns {sorted(clash)}")
    return pa.schema(list(SIDE_TABLE_KEYS) + list(fields))
