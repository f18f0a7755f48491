"""The benchmarks of labs g1-g5, g7 and g8: one module per lab.

Each lab module builds its workloads from the stack outputs (`build_workloads`), runs them on the
lab's cluster and records the raw API objects, events and logs it saw (`run`), and turns that
recording into a typed result with pure functions (`measure`), so the same measurement runs on a
live cluster and on a recorded fixture (tests/data/labs/, examples/).
"""
