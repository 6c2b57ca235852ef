"""InterCode results: `{task_index: {environment, dataset, task_id, query, turn_history, summary}}`.

One trajectory per key (locator `key:<k>`). Turn i is `turn_history.actions[i]` and
`observations[i]`, with `rewards[i]` as its reward, `thoughts[i]` (ReAct runs) as its thought and
`valid_action[i]` in metadata; an invalid action (`valid_action[i] == false`) is an error turn.
Actions are kept verbatim, including the ReAct wrappers (`execute[...]`, `submit`) the agent wrote.

Domain: "terminal" for every InterCode environment (ic_bash, ic_ctf, ic_sql, ic_python, ...).
InterCode is interactive coding against an interpreter in a container: the agent types a shell
command, a SQL statement or Python code and reads what the interpreter prints, which is what the
terminal domain models; none is a repository-level software task ("swe"). `ingest --domain`
overrides it.

Two other published layouts hold the same runs: plan-solve-refine logs wrap the records as
`{meta, logs: {task_index: record}}` (split under `logs`, locator `logs/key:<k>`, the run's `meta`
kept in each trajectory's metadata), and human-play logs store
`{task_index: {environment, query_idx, query, gold, reward, trajectory: [{action, observation}]}}`
(a turn per `trajectory` step, locator `trajectory[i]`; no per-turn reward or validity). The
environment itself writes that record alone, unkeyed, for every episode of a run given a `traj_dir`
(`IntercodeEnv.save_trajectory`: `logs_<env>/log_<time>.json`, with the env's `info`); it is read
the same way, as one trajectory at `$` whose agent is not known.

A ReAct run whose reply held no code did not step the environment: `eval_react.py` logs the
harness's "Error executing query: Your last `execute` action did not contain ... code" with the
previous turn's `valid_action` repeated, so that turn is an error whatever its validity says
(metadata `not_executed`).

When the policy raised, `eval_n_turn.py` logs `"blocked"` as a last action, with a reward but no
observation or validity, and ends the episode: that turn is a `message` turn (nothing ran), an
error, metadata `policy_error`; the columns one entry short are not a length mismatch then.

A plain `submit` steps nothing: `IntercodeEnv.step` scores the episode and hands back the
previous observation again, which the log stores as the submit's observation (57 of the sample's
59 submits repeat it word for word). That turn is a `message` turn with no observation, keeping
its reward (the episode's score), metadata `submit`; `forced` when `eval_react.py` wrote the submit
itself after the turn limit (thought "EXCEEDED MAX TURNS ...").

SQL observations are stored by InterCode as the text of Python's `str(rows)`; a result kept as a
JSON list of rows is rendered the same way (rows as tuples), so both read alike and identically
on every run.
"""

from __future__ import annotations

from typing import Any

from collectors.base import ImportContext, Importer, any_record, loose_json, outcome_of, require, to_float
from schemas.records import RecordError, Trajectory, Turn, dumps

_LISTS = ("actions", "observations", "rewards", "valid_action", "thoughts")
# eval_react.py's observation for a reply whose action held no code (the environment was not stepped)
_NOT_EXECUTED = "Error executing query: Your last `execute` action did not contain"


def _is_episode_log(rec: Any) -> bool:
    """`{environment: "ic_...", trajectory: [{action, observation}], ...}`: one episode as the
    environment logs it (`IntercodeEnv.save_trajectory`), alone or under a task index (human play)."""
    if not isinstance(rec, dict):
        return False
    env, steps = rec.get("environment"), rec.get("trajectory")
    return (isinstance(env, str) and env.startswith("ic_") and isinstance(steps, list)
            and all(isinstance(s, dict) and "action" in s and "observation" in s for s in steps[:3]))


def _tuplify(value: Any, depth: int = 0) -> Any:
    """JSON lost the tuples of SQL rows: rows (lists inside the result list) become tuples again."""
    if isinstance(value, list):
        items = [_tuplify(v, depth + 1) for v in value]
        return tuple(items) if depth > 0 else items
    if isinstance(value, dict):
        return {k: _tuplify(v, depth + 1) for k, v in value.items()}
    return value


def render_observation(value: Any) -> str | None:
    """Text of an observation: strings verbatim, structures as Python's `str` would print them."""
    if value is None or isinstance(value, str):
        return value
    return repr(_tuplify(value))


def _is_task_record(rec: Any) -> bool:
    if not isinstance(rec, dict):
        return False
    th = rec.get("turn_history")
    if isinstance(th, dict):
        return isinstance(th.get("actions"), list) and "observations" in th
    return _is_episode_log(rec)  # human play: such records under task indices


class InterCodeImporter(Importer):
    name = "intercode"
    container = "json"
    version = "2"  # 2: a plain `submit` is a message turn without the repeated observation

    def sniff(self, doc: Any) -> bool:
        if _is_episode_log(doc):
            return True
        if isinstance(doc, dict) and isinstance(doc.get("logs"), dict) and isinstance(doc.get("meta"), dict):
            doc = doc["logs"]  # plan-solve-refine: {meta, logs: {task_index: record}}
        if not isinstance(doc, dict) or not doc:
            return False
        return any_record(doc.values(), _is_task_record)

    def split(self, doc: dict, ctx: ImportContext):
        if _is_episode_log(doc):
            yield "$", doc  # the environment's own log of one episode
            return
        if isinstance(doc.get("logs"), dict) and isinstance(doc.get("meta"), dict):
            for k, rec in doc["logs"].items():
                yield f"logs/key:{k}", {**rec, "run_meta": doc["meta"]} if isinstance(rec, dict) else rec
            return
        for k, rec in doc.items():
            yield f"key:{k}", rec

    def convert(self, rec: Any, locator: str, ctx: ImportContext) -> Trajectory:
        if isinstance(rec, dict) and "turn_history" not in rec and isinstance(rec.get("trajectory"), list):
            return self._episode_log(rec, locator, ctx, agent=None if locator == "$" else "human")
        th = require(rec, "turn_history", locator)
        if not isinstance(th, dict):
            raise RecordError("malformed_record", f"{locator}: 'turn_history' is not an object")
        actions = require(th, "actions", f"{locator} turn_history")
        require(th, "observations", f"{locator} turn_history")
        cols: dict[str, list] = {}
        blocked = isinstance(actions, list) and bool(actions) and actions[-1] == "blocked"
        short: set[str] = set()  # columns without an entry for the blocked action
        for name in _LISTS:
            col = th.get(name)
            if col is None and name not in ("actions", "observations"):
                continue
            if not isinstance(col, list):
                raise RecordError("malformed_record", f"{locator}: turn_history.{name} is not a list")
            if blocked and len(col) == len(actions) - 1:
                col = [*col, None]
                short.add(name)
            elif len(col) != len(actions):
                raise RecordError(
                    "length_mismatch",
                    f"{locator}: turn_history.{name} has {len(col)} entries for {len(actions)} actions",
                )
            cols[name] = col
        turns = [self._turn(cols, i, locator) for i in range(len(actions))]
        if "observations" in short:
            last = turns[-1]
            last.kind, last.observation_kind, last.is_error = "message", "none", True
            last.locator = f"turn_history.actions[{len(actions) - 1}]"
            last.metadata = dumps({"policy_error": True})
        summary = loose_json(rec.get("summary"))
        summary = (
            summary if isinstance(summary, dict) else ({"raw": rec["summary"]} if rec.get("summary") else {})
        )
        rewards = [r for r in (to_float(x) for x in cols.get("rewards", [])) if r is not None]
        reward = to_float(summary.get("max_reward"))
        if reward is None and rewards:
            reward = max(rewards)
        task_id = rec.get("task_id")
        meta = {k: v for k, v in rec.items() if k not in ("turn_history", "query")}
        meta["summary"] = summary or None
        extra_cols = {k: v for k, v in th.items() if k not in _LISTS}
        if extra_cols:
            meta["turn_history_extra"] = extra_cols
        return self._trajectory(rec, locator, ctx, turns, reward, task_id, "intercode", meta)

    def _trajectory(self, rec: dict, locator: str, ctx: ImportContext, turns: list[Turn], reward: float | None,
                    native: Any, agent: str | None, meta: dict) -> Trajectory:
        return Trajectory(
            domain=ctx.domain("terminal"),
            source_format=self.name,
            native_id=str(native) if native is not None else locator.split("key:", 1)[-1],
            record_digest=ctx.record_digest(locator),
            turns=turns,
            task=rec.get("query") if isinstance(rec.get("query"), str) else None,
            agent=agent,
            outcome=outcome_of(reward),
            reward=reward,
            metadata=dumps(meta),
            locator=locator,
        )

    def _episode_log(self, rec: dict, locator: str, ctx: ImportContext, agent: str | None) -> Trajectory:
        turns = []
        for i, step in enumerate(rec["trajectory"]):
            if not isinstance(step, dict):
                raise RecordError("malformed_record", f"{locator} trajectory[{i}]: expected an object")
            cols = {"actions": [require(step, "action", f"{locator} trajectory[{i}]")],
                    "observations": [require(step, "observation", f"{locator} trajectory[{i}]")]}
            t = self._turn(cols, 0, f"{locator} trajectory[{i}]")
            t.locator = f"trajectory[{i}]"
            turns.append(t)
        meta = {k: v for k, v in rec.items() if k not in ("trajectory", "query")}
        return self._trajectory(rec, locator, ctx, turns, to_float(rec.get("reward")),
                                rec.get("query_idx", rec.get("task_id")), agent, meta)

    @staticmethod
    def _turn(cols: dict[str, list], i: int, locator: str) -> Turn:
        action = cols["actions"][i]
        if action is not None and not isinstance(action, str):
            raise RecordError(
                "malformed_record", f"{locator} turn {i}: action is {type(action).__name__}, not text"
            )
        observation = render_observation(cols["observations"][i])
        valid = cols["valid_action"][i] if "valid_action" in cols else None
        meta: dict[str, Any] = {"valid_action": valid} if "valid_action" in cols else {}
        if observation is not None and observation.startswith(_NOT_EXECUTED):
            is_error = True  # the harness's answer to a reply without code; `valid` is the last turn's
            meta["not_executed"] = True
        elif isinstance(valid, bool):
            is_error = not valid
        elif observation is not None and observation.startswith("Error executing"):
            is_error = True  # ic_python/ic_sql error text when validity was not recorded
        else:
            is_error = None
        thought = cols["thoughts"][i] if "thoughts" in cols else None
        thought_text = thought if isinstance(thought, str) else (dumps(thought) if thought is not None else None)
        reward = to_float(cols["rewards"][i]) if "rewards" in cols else None
        if isinstance(action, str) and action.strip() == "submit":  # scored, nothing ran: no observation
            meta["submit"] = True
            if thought_text is not None and thought_text.startswith("EXCEEDED MAX TURNS"):
                meta["forced"] = True
            return Turn(kind="message", action=action, observation=None, observation_kind="none",
                        thought=thought_text, is_error=None, reward=reward,
                        locator=f"turn_history.actions[{i}]", metadata=dumps(meta))
        return Turn(
            kind="env",
            action=action,
            observation=observation,
            observation_kind="stdout",
            thought=thought_text,
            is_error=is_error,
            reward=reward,
            locator=f"turn_history.actions[{i}]+turn_history.observations[{i}]",
            metadata=dumps(meta) if meta else None,
        )
