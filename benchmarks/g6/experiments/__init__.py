"""Lab g6's experiments: the max-num-seqs sweep and, beside it, the KV cache as the limit (kv), what
quantization costs and buys (quant), the cold start (cold-start), the rate that holds the SLOs (saturation)
and the prefix cache (prefix). Each is a search or A/B module, its report, and its command (how a g6 run
drives it, benchmarks.g6.experiment); table.py lists them."""
