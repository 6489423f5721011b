"""One investigation: wiring (`wiring.run_ask`), the engine, the turn loop and synthesis.

`wiring` opens the input, the models and the trace and hands them to the
`engine.Engine`, which holds the run's parts: the shared state
(`services`), the sub-calls (`subcalls`: slices, `llm_query`,
`partition_map`), child nodes (`children`) and each node's synthesis
(`node_synthesis`). `node.Node` is the turn loop of one node, speaking to its
run only through `host.NodeHost`; `node_prompt` builds its messages;
`runner.ActionRunner` runs its peek/grep/execute/restart actions. `ledger`,
`context` and `synthesis` turn what was found into the answer; `actionspec`
and `options` declare the actions and the settings once. What this package
may import, and the layers inside it: docs/architecture.md.
"""
