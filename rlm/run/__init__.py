"""One investigation: wiring (`wiring.run_ask`), the engine, the turn loop and synthesis.

`wiring` opens the input, the models and the trace and hands them to the
`engine.Engine`, which owns the run state and the sub-calls (slices,
`llm_query`, child nodes, `partition_map`). `node.Node` is the turn loop of
one node; `runner.ActionRunner` runs its peek/grep/execute/restart actions.
`ledger`, `context` and `synthesis` turn what was found into the answer;
`settings` holds the limits (rlm.model.budget enforces them); `prompts` the texts the model reads.
May import: rlm.model, rlm.sandbox (client side), rlm.input, rlm.text,
rlm.trace, rlm.errors; never rlm.cli or rlm.replay.
"""
