"""The controller's online loop: follow the skew while a job runs.

Each step the loop reads what happened since the last step from a rate source, folds it into
per-key rates, lets a policy pick a few changes to the hot set, and applies them to the
switch (evictions and installs in one Write RPC, freed offsets reused at once: the data plane
keeps that exact, docs/design.md section 4). The switch target keeps its own record of the
hot set, so a step reads nothing back from the switch; with `PSFrequencySource(collected=True)`
as the only source a step's one RPC is that Write (bench/online_step.py measures a step).

- observation.py: what a source reports (`Observation`, the `RateSource` protocol), and the
  updates a hot key's presence at the PS implies (`updates_from_presence`);
- sources.py: the rate sources: the switch's hit counters, the PS's frequency files
  (contract/freqfile.py), their sum (controller/sketch.py has the in-switch sketch's);
- estimators.py: per-key rates (`ChangeRateEstimator`: the mean since a key's rate last
  changed; `RateEstimator`: exponential decay);
- policy.py: which keys enter and leave (`Hysteresis`, its `Changes`);
- switch_target.py: a job's hot keys on the switch and the Write that changes them
  (`SwitchTarget`);
- loop.py: one step, and the loop that repeats it (`OnlineController`, `StepReport`).

Log line of a step: "iteration 120: +14 -9 keys, coverage 41.2% (oracle 44.0%)": the hot
set's share of the updates counted in the interval (with the hot set the interval ran with),
and the share the best `budget` keys of that interval would have had (only when the counts
cover every key, i.e. the PS files are read).
"""
