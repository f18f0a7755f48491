"""Reading a lab's cluster, for every lab and for g6: the objects the benchmarks create (objects, images),
the stack outputs they need (stack), times and phases read from objects and events (timeline, phases,
phases_report), recordings of a run (record) and the evidence of what really ran (evidence). The floor
below benchmarks.labs and benchmarks.g6, which it never imports."""
