"""The one launch path, shared by the CLI's verbs and every point of a sweep: a typed config to a checked
plan (`plan`), then the run id, the target's request, the run record and the job (`runs`), and what a
sweep's folder reports (`summary`). It sits above the planner, the targets and the images, and below
`compiler.cli` and `compiler.sweep`, which never import each other."""
