"""The fault kinds the MCP fault proxy injects, and what each does (`collectors.mcp.faults`).

Apart from the proxy so that the command line's help can list them without importing the MCP SDK."""

FAULTS: dict[str, str] = {
    "tool_error": "in-band tool error: the result becomes `isError: true` with an error text",
    "truncated": "partial payload: the first content block's text cut to 10-60% of its length; "
                 "later blocks and `structuredContent` dropped",
    "empty_result": "an empty result: `content: []`, no `structuredContent`",
    "schema_violation": "`structuredContent` that violates the tool's declared `outputSchema` "
                        "(a required property of the wrong type)",
    "latency": "the unchanged response, delivered after an added delay",
    "timeout": "the response is withheld, so the client's request timeout fires",
    "server_crash": "the server process group is SIGKILLed after it answered; the client sees the connection close",
    "rate_limit": "a JSON-RPC error -32010 `Rate limit exceeded` (with `data.retryAfterSeconds`) instead of the result",
}
