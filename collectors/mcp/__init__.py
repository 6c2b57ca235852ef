"""Live collection from MCP servers: tool schemas, calls and responses, with fault injection.

- `spec`: server specs (YAML): command, args, env, cwd, setup of a per-session world, sessions;
- `wire`: server processes, the stdio transport (ours, see why there) and the SDK's HTTP one,
  and the log of raw JSON-RPC;
- `faults`: the seeded fault-injection proxy (an in-process transport wrapper);
- `recorder`: one session → one `mcp` trajectory (`mcp-live`) + raw rows;
- `raw`: the `mcp_raw` side table (zstd JSON lines per turn);
- `collect`: many sessions into a corpus through `CollectionSink`;
- `contracts`: data contracts over the recorded MCP data.

Entry points: `worldline collect mcp` (collectors/mcp_cli.py), the Dagster asset
`mcp_trajectories` (dagster_project/mcp_assets.py), `bench/mcp.py`. Import from the submodules: the
package itself imports nothing, so that a light one (`shape`, which the traffic importer in the ingest
registry uses) does not load the MCP SDK that `collect` and `recorder` need.
"""
