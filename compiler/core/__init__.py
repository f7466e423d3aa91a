"""What the planner and the targets both check against, below both of them: the instance-type catalog
(`catalog`), the full-match grammars of config values (`grammar`) and what a target offers the generic
rules (`capabilities`). Host-only: the image ships `compiler.spec`, not this."""
