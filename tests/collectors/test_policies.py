"""The agent policy behind an OpenAI-compatible endpoint, against the scripted test server."""

from __future__ import annotations

from collectors.policies import OpenAIChatPolicy
from tests.support.openai_server import ScriptedOpenAIServer


def test_arguments_that_are_json_but_no_object_are_kept_as_given() -> None:
    """`"arguments": "\\"grep -c ERROR app.log\\""` (a JSON string) raised AttributeError in the policy, and the
    trajectory was ended as if the endpoint had failed (outcome error; every rerun collected it again)."""
    with ScriptedOpenAIServer([{"tool_calls": [{"name": "bash", "arguments": "grep -c ERROR app.log"}]}], model="m") as srv:
        policy = OpenAIChatPolicy(base_url=srv.base_url, model="m", retries=0)
        policy.reset("count the errors", [{"name": "bash", "parameters": {"type": "object"}}])
        first = policy.next_action([])
        assert (first.tool_name, first.tool_args, first.text) == (
            "bash", {"_unparsed": '"grep -c ERROR app.log"'}, 'bash({"_unparsed": "\\"grep -c ERROR app.log\\""})')
