"""GPU evidence in one call: every CUDA path of the trainer once, MFU, and the planner's accuracy, within a budget.

    bench/gpu_evidence.sh OUT                 # on one H100/H200: the full run, 8 minutes at most
    bench/gpu_evidence.sh --cpu OUT           # tiny shapes on gloo, in well under a minute (the suite runs it)

Three parts, each in worker processes (`worker.py`) so that a crash or a hang in one job costs that job
only: `paths` (each strategy and feature once, pass/fail with the error line), `mfu` (tokens/s, MFU by the
trainer's own formula, peak memory, predicted against measured step time) and `accuracy` (the planner's
predicted peak against the allocator's, `bench/planner_accuracy.py`'s configurations). Each part gets its
share of what is left of the budget; a part or job the budget no longer covers is skipped with a note.
`OUT/gpu_evidence.md` and `OUT/gpu_evidence.json` are rewritten after every job, so a machine that stops
leaves the figures it had. `bench/gpu_evidence_apply.py` turns a full run's JSON into the planner's constants.
"""
