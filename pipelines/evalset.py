"""Evaluation sets in the AgentWorldBench JSON-lines form, from held-out (test-split) trajectories.

AgentWorldBench (Qwen-AgentWorld's world-model benchmark) evaluates one turn per row:
`{task, id, prompt, response, current_prompt, system_str, turn_idx, total_turns}`, with `prompt`
and `response` parallel lists over the turns up to the evaluated one (the published layout, the one
`collectors.agentworldbench` reads first). Each turn prompt is

    ### Turn N
    **Task Instruction:**        (turn 1, when the trajectory has a task)
    <task>

    **Current State:**           (turn 1, when it has an initial state)
    <initial state>

    **Action:**
    ```json                      (`json` when the action is a JSON object or list, else bare)
    <action>
    ```

and the last one carries the benchmark's instruction suffix; each response is
`**Environment Observation:**\\n<observation>`; `current_prompt` is the last prompt without the
suffix; `system_str` is the world-model system prompt of `pipelines.render` without the task and
initial state (the turn-1 prompt carries those, as in the benchmark). `task` is the domain name,
which is how the benchmark names its files and how the importer recovers the domain.

The action of a turn is the user message of the world-model rendering (agent messages between
environment turns are folded into it, as the training form does), so evaluation and training see
the same inputs. Per trajectory, the first, the last and `middle` evenly spaced turns are
evaluated. A row whose text would be misread by the benchmark's own parser (a line that looks like
a section header, the instruction suffix or a `<predicted_observation>` tag inside a content) is
left out and counted, so every row written round-trips through the importer.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any

import orjson

from pipelines.render import Conversation, RenderConfig, system_prompt

SUFFIX = ("\n\nPlease analyze the input above and predict the realistic output/response that the environment would "
          "produce.\n\nFirst, think step by step. Then, provide the simulated environment observation wrapped strictly "
          "within the <predicted_observation></predicted_observation> tags.")
OBS_MARKER = "**Environment Observation:**"
FIELDS = ("task", "id", "prompt", "response", "current_prompt", "system_str", "turn_idx", "total_turns")
# what the benchmark's parser (collectors.agentworldbench) would take for structure inside a content
_UNSAFE = re.compile(
    r"^\s*\*\*(Task Instruction|Current State|Current Phone State|Action|Environment Observation)\s*:\*\*"
    r"|^\s*###\s*Turn\s*\d|Please analyze the input above|<\s*/?\s*predicted_observation", re.M | re.I)


def evaluated_turns(n: int, middle: int) -> list[int]:
    """0-based group indices: first, `middle` evenly spaced, last."""
    if n <= 0:
        return []
    picks = {0, n - 1}
    for i in range(1, middle + 1):
        picks.add(round(i * (n - 1) / (middle + 1)))
    return sorted(picks)


def _fence(action: str) -> str:
    lang = ""
    s = action.strip()
    if s[:1] in "{[":
        try:
            v = orjson.loads(s)
            lang = "json" if isinstance(v, dict | list) else ""
        except orjson.JSONDecodeError:
            pass
    return f"```{lang}\n{action}\n```"


def turn_prompt(k: int, action: str, task: str | None, state: str | None) -> str:
    parts = [f"### Turn {k}"]
    head = []
    if k == 1 and task:
        head.append(f"**Task Instruction:**\n{task}")
    if k == 1 and state:
        head.append(f"**Current State:**\n{state}")
    head.append(f"**Action:**\n{_fence(action)}")
    return parts[0] + "\n" + "\n\n".join(head)


def eval_rows(traj: dict[str, Any], conv: Conversation, middle: int = 2,
              render: RenderConfig | None = None, exclude: Collection[int] = ()) -> tuple[list[dict[str, Any]], int]:
    """(rows, rows left out as unparseable) for one held-out trajectory. `traj` and `conv` carry
    already-redacted text. `exclude`: group positions not to evaluate (the training set trains them)."""
    groups = conv.groups
    n = len(groups)
    task, state = traj.get("task"), traj.get("initial_state")
    # a row holds the turns up to its own: text the parser would misread in a later turn spares it
    unsafe = [bool(_UNSAFE.search(g.user) or _UNSAFE.search(g.observation)) for g in groups]
    first_unsafe = -1 if _UNSAFE.search(task or "") or _UNSAFE.search(state or "") else next(
        (i for i, u in enumerate(unsafe) if u), n)
    system = system_prompt({"domain": traj.get("domain"), "action_space": traj.get("action_space")}, render or RenderConfig())
    prompts = [turn_prompt(i + 1, g.user, task, state) for i, g in enumerate(groups)]
    responses = [f"{OBS_MARKER}\n{g.observation}" for g in groups]
    rows, left_out = [], 0
    for t in evaluated_turns(n, middle):
        if t in exclude:
            continue
        if t >= first_unsafe:
            left_out += 1
            continue
        rows.append({
            "task": traj["domain"],
            "id": traj["trajectory_id"],
            "prompt": prompts[:t] + [prompts[t] + SUFFIX],
            "response": responses[: t + 1],
            "current_prompt": prompts[t],
            "system_str": system,
            "turn_idx": t + 1,
            "total_turns": n,
        })
    return rows, left_out


def dumps_row(row: dict[str, Any]) -> bytes:
    """One JSON line, fields in the benchmark's order."""
    return orjson.dumps({k: row[k] for k in FIELDS}) + b"\n"
